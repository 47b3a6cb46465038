"""Loop declarations: how each latent-iteration family iterates, in one small declarative object per family.

Beside :class:`~sst_interp.model.adapters.ArchitectureAdapter` (how one decoder layer splits around the SST blend),
a :class:`LoopDeclaration` says how a family *loops*:

- its *visits*: which decoder layers run how many times per token, and in what order. Every visit is addressed by
  ``(iteration, layer)``, where ``layer`` indexes the family's *recorded layer axis* (``layer_names``) and
  ``iteration`` counts, from 1, the times that address is reached for one token at one depth;
- what carries from one visit to the next;
- which loop count ``--depths`` sets (``depth_key``, a config field; ``None`` for SST, whose iterations are reruns
  of the emitting pass) and which values it can take;
- where a per-position exit can be taken, and which state the per-iteration logits (the family's *lens*) read.

The declaration is data: the recorder, the manifest and the error messages read it; the arithmetic stays in the
family's own transformers classes (SST's in :mod:`sst_interp.model.layer`).

Visit order per generated token, for the three families (``n`` layers per HRM stack, ``L`` = ``L_cycles``)::

    SST, depth k:            for i in 1..k:  layers 0..N-1                        (a rerun of the emitting pass)
    HRM-Text, depth D:       for h in 1..D:  for l in 0..L-1: L-stack 0..n-1 ;  H-stack 0..n-1
                             recorded layer of L-visit l, block j = l*n + j;  of the H visit = L*n + j
    Inkling-2 Loop, depth P: layers 0..s-1 ; for p in 1..P: layers s..e-1 ; layers e..N-1
                             (layers outside s..e-1 hold iteration 1 only)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sst_interp.kernels.errors import UsageError
from sst_interp.model.adapters import supported_model_types


@dataclass(frozen=True)
class LoopDeclaration:
    """How one latent-iteration family loops (see the module docstring).

    Args:
        family: the family's short name (manifests, messages): ``sst``, ``hrm_text``, ``inkling2_loop``.
        model_types: the ``config.model_type`` values it serves.
        carries: what carries from one visit to the next (prose, written into manifests and docs).
        depth_meaning: what ``--depths D`` sets for this family (prose).
        depth_key: the config field a depth sets, or ``None`` when iterations are reruns (SST).
        max_depth: the largest depth the family honours (``None``: no limit but memory).
        exits: where a per-position exit can be taken (prose).
        lens: which state the per-iteration logits read (prose).
        layer_names: ``config -> [name of each recorded layer]``: the recorded layer axis, in visit order.
        visits: ``(config, depth) -> [(iteration, layer), ...]``: every visit of one token, in the order it runs.
        visit_sites: for a family transformers runs natively: ``model -> [(module, address)]``, the modules whose
            output is a visit and ``address(call kwargs) -> (iteration, layer)`` for one call of it (``None``:
            the family records through its own layers, as SST does).
        lens_sites: ``model -> [(module, iteration(call kwargs))]``: the modules whose output [B, T, d] the lens
            reads, and which iteration a call is.
        lens_head: ``(model, state [B, d]) -> logits [B, V]``: the family's own head on a lens state.
        depth_fields: ``(config, depth) -> {config field: value}``: what running at ``depth`` sets.
        state_layer: ``config -> recorded layer`` whose output is the loop state that carries and that the ``state``
            exit rule reads (``None``: SST's last stateful layer, from its own config).
        freeze_layers: ``config -> [recorded layer]``: the layers whose visit hands a carried state on to a later
            visit, where a ``freeze`` intervention can keep that state as the visit read it (``None``: SST's
            stateful layers, handled by its own layers).
        freeze_from: the first iteration at which a freeze is defined (a visit that reads no carried state has
            none to keep).
        freeze_meaning: what a freeze at ``(iteration, layer)`` does in this family (prose, for docs and errors).
        lens_norm: ``model -> norm module`` that the per-layer logit lens (``analyses.logit_lens``) applies to any
            recorded layer's output before the model's head (``None``: the decoder's final norm, as for SST).
    """

    family: str
    model_types: tuple[str, ...]
    carries: str
    depth_meaning: str
    depth_key: str | None
    max_depth: int | None
    exits: str
    lens: str
    layer_names: Callable[[Any], list[str]]
    visits: Callable[[Any, int], list[tuple[int, int]]]
    visit_sites: Callable[[Any], list[tuple[Any, Callable[[dict[str, Any]], tuple[int, int]]]]] | None = None
    lens_sites: Callable[[Any], list[tuple[Any, Callable[[dict[str, Any]], int]]]] | None = None
    lens_head: Callable[[Any, Any], Any] | None = None
    depth_fields: Callable[[Any, int], dict[str, int]] | None = None
    state_layer: Callable[[Any], int] | None = None
    freeze_layers: Callable[[Any], list[int]] | None = None
    freeze_from: int = 1
    freeze_meaning: str = ""
    lens_norm: Callable[[Any], Any] | None = None

    def check_depth(self, depth: int) -> int:
        """``depth`` if the family can run it, else a :class:`UsageError` saying what a depth means here."""
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise UsageError(f"{self.family}: a depth is an integer >= 1 ({self.depth_meaning}), got {depth!r}")
        if self.max_depth is not None and depth > self.max_depth:
            raise UsageError(f"{self.family} cannot run depth {depth}: {self.depth_meaning}, at most "
                             f"{self.max_depth}")
        return depth

    def iterations_per_layer(self, config: Any, depth: int) -> list[int]:
        """How many times each recorded layer is visited per token at ``depth``: [num recorded layers]."""
        counts = [0] * len(self.layer_names(config))
        for _, layer in self.visits(config, depth):
            counts[layer] += 1
        return counts

    def looped_layers(self, config: Any) -> list[int]:
        """The recorded layers visited more often at depth 2 than at depth 1 (every other layer holds the iterations
        it has at depth 1, whatever the depth)."""
        once, twice = self.iterations_per_layer(config, 1), self.iterations_per_layer(config, 2)
        return [layer for layer, (a, b) in enumerate(zip(once, twice)) if b > a]

    def describe(self, config: Any, depths: list[int]) -> dict[str, Any]:
        """The manifest's ``loop`` object: the structure, and per depth how often each recorded layer runs."""
        return {
            "family": self.family,
            "layers": self.layer_names(config),
            "carries": self.carries,
            "depth_meaning": self.depth_meaning,
            "depth_key": self.depth_key,
            "exits": self.exits,
            "lens": self.lens,
            "iterations_per_layer": {str(d): self.iterations_per_layer(config, d) for d in depths},
            "state_layer": self.state_layer(config) if self.state_layer is not None else None,
        }


# ------------------------------------------------------------------------------------------------ SST
def _sst_layer_names(config: Any) -> list[str]:
    return [f"layers.{i}" for i in range(int(config.num_hidden_layers))]


def _sst_visits(config: Any, depth: int) -> list[tuple[int, int]]:
    return [(i, layer) for i in range(1, depth + 1) for layer in range(int(config.num_hidden_layers))]


SST_LOOP = LoopDeclaration(
    family="sst",
    model_types=tuple(supported_model_types()),  # every backbone an ArchitectureAdapter converts
    carries="one state per layer: the layer's output C, blended into the next pass's post-attention residual",
    depth_meaning="iterations of the pass that emits each token (its KV entries are overwritten each time)",
    depth_key=None,
    max_depth=None,
    exits="after any iteration of any position (per-position policies)",
    lens="the LM head (final norm, soft-capping) on the last layer's output after each iteration",
    layer_names=_sst_layer_names,
    visits=_sst_visits,
)


# ------------------------------------------------------------------------------------------------ HRM-Text
def _hrm_slots_per_cycle(config: Any) -> int:
    return int(config.num_layers_per_stack) * (int(config.L_cycles) + 1)


def _hrm_layer_names(config: Any) -> list[str]:
    n, cycles = int(config.num_layers_per_stack), int(config.L_cycles)
    names = [f"L{l}.L_module.layers.{j}" for l in range(cycles) for j in range(n)]
    return names + [f"H.H_module.layers.{j}" for j in range(n)]


def _hrm_visits(config: Any, depth: int) -> list[tuple[int, int]]:
    return [(h, slot) for h in range(1, depth + 1) for slot in range(_hrm_slots_per_cycle(config))]


def hrm_address(config: Any, block: int, cycle_offset: int) -> tuple[int, int]:
    """(iteration, recorded layer) of an HRM-Text decoder-layer call: block ``block`` of a stack, called with the
    stack's ``cycle_offset`` (transformers' KV slot of the call is ``block + cycle_offset``)."""
    slot = int(block) + int(cycle_offset)
    per_cycle = _hrm_slots_per_cycle(config)
    return slot // per_cycle + 1, slot % per_cycle


def _hrm_visit_sites(model: Any) -> list[tuple[Any, Callable[[dict[str, Any]], tuple[int, int]]]]:
    inner = model.model
    sites = []
    for stack in (inner.L_module, inner.H_module):
        for block, layer in enumerate(stack.layers):
            sites.append((layer, lambda kwargs, block=block: hrm_address(model.config, block,
                                                                         kwargs.get("cycle_offset", 0))))
    return sites


def _hrm_lens_sites(model: Any) -> list[tuple[Any, Callable[[dict[str, Any]], int]]]:
    return [(model.model.H_module,
             lambda kwargs: int(kwargs.get("cycle_offset", 0)) // _hrm_slots_per_cycle(model.config) + 1)]


def _hrm_lens_head(model: Any, state: Any) -> Any:
    # z_H leaves the H stack final-normed; HrmTextForCausalLM applies lm_head to it directly
    return model.lm_head(state)


def _hrm_freeze_layers(config: Any) -> list[int]:
    # each stack visit hands on its output (final-normed) as z_L or z_H: the carrying layer is the stack's last block
    n, cycles = int(config.num_layers_per_stack), int(config.L_cycles)
    return [visit * n + n - 1 for visit in range(cycles + 1)]


def _hrm_depth_fields(config: Any, depth: int) -> dict[str, int]:
    # num_hidden_layers counts KV slots (one per stack block per visit): DynamicCache(config=...) sizes from it
    slots = int(config.num_layers_per_stack) * depth * (int(config.L_cycles) + 1)
    return {"H_cycles": depth, "num_hidden_layers": slots}


HRM_TEXT_LOOP = LoopDeclaration(
    family="hrm_text",
    model_types=("hrm_text",),
    carries="z_H (the H stack's output, starts at the scaled token embedding) and z_L (the L stack's output, "
            "starts at z_L_init); each L visit reads z_L + z_H, each H visit z_H + z_L",
    depth_meaning="H-cycles per token (config H_cycles); each H-cycle runs L_cycles L-stack visits, then one H "
                  "visit, every visit with its own KV slots",
    depth_key="H_cycles",
    max_depth=None,
    exits="after any H-cycle (the lens reads z_H there)",
    lens="lm_head on z_H (the H stack's final-normed output) after each H-cycle; at the last cycle this is the "
         "model's own logits",
    layer_names=_hrm_layer_names,
    visits=_hrm_visits,
    visit_sites=_hrm_visit_sites,
    lens_sites=_hrm_lens_sites,
    lens_head=_hrm_lens_head,
    depth_fields=_hrm_depth_fields,
    state_layer=lambda config: _hrm_slots_per_cycle(config) - 1,  # the last H block: z_H before the stack's norm
    freeze_layers=_hrm_freeze_layers,
    freeze_from=1,
    freeze_meaning="at the last block of an L visit, z_L after the visit is the z_L it read (z_L_init at the first "
                   "visit); at the last H block, z_H after the H-cycle is the z_H it read (the scaled token "
                   "embedding at cycle 1); the block's own output, recorded, is unchanged. Frozen at cycles p..D, "
                   "the model answers from z_H of cycle p - 1",
    # the model has no norm after the stacks: each stack's output is final-normed, and both stacks' final norms are
    # the same weightless RMSNorm, so every block's output is read as z_H is
    lens_norm=lambda model: model.model.H_module.final_norm,
)


# ------------------------------------------------------------------------------------------------ Inkling-2 Loop
def _inkling_layer_names(config: Any) -> list[str]:
    return [f"layers.{i}" for i in range(int(config.num_hidden_layers))]


def _inkling_visits(config: Any, depth: int) -> list[tuple[int, int]]:
    start, end, total = int(config.loop_layer_index_start), int(config.loop_layer_index_end), \
        int(config.num_hidden_layers)
    before = [(1, layer) for layer in range(start)]
    looped = [(p, layer) for p in range(1, depth + 1) for layer in range(start, end)]
    return before + looped + [(1, layer) for layer in range(end, total)]


def inkling_pass(config: Any, cache_offset: int) -> int:
    """The pass (1-based) of a looped Inkling-2 Loop layer call from its ``cache_offset`` keyword (0, absent, in pass
    1; ``num_hidden_layers + (p - 2) * looped - loop_layer_index_start`` in pass p >= 2, transformers' layout)."""
    if not cache_offset:
        return 1
    looped = int(config.loop_layer_index_end) - int(config.loop_layer_index_start)
    return (int(cache_offset) - int(config.num_hidden_layers) + int(config.loop_layer_index_start)) // looped + 2


def _inkling_visit_sites(model: Any) -> list[tuple[Any, Callable[[dict[str, Any]], tuple[int, int]]]]:
    config = model.config
    start, end = int(config.loop_layer_index_start), int(config.loop_layer_index_end)
    sites = []
    for index, layer in enumerate(model.model.layers):
        if start <= index < end:
            sites.append((layer, lambda kwargs, index=index: (inkling_pass(model.config,
                                                                           kwargs.get("cache_offset", 0)), index)))
        else:
            sites.append((layer, lambda kwargs, index=index: (1, index)))
    return sites


def _inkling_lens_sites(model: Any) -> list[tuple[Any, Callable[[dict[str, Any]], int]]]:
    last_looped = model.model.layers[int(model.config.loop_layer_index_end) - 1]
    return [(last_looped, lambda kwargs: inkling_pass(model.config, kwargs.get("cache_offset", 0)))]


def _inkling_lens_head(model: Any, state: Any) -> Any:
    # the model's own final norm, head and soft-cap, applied to the looped block's output (the post-loop layers and
    # the final block attention residual do not run for a lens reading)
    normed = model.model.norm(state).to(state.dtype)
    return model.logit_softcap(model.lm_head(normed).float())


def _inkling_depth_fields(config: Any, depth: int) -> dict[str, int]:
    return {"loop_num_passes": depth}


INKLING2_LOOP = LoopDeclaration(
    family="inkling2_loop",
    model_types=("inkling2_loop_text",),
    carries="the pre-loop state (hidden state and block states after the layer before the looped block) restarts "
            "every pass; the previous pass's hidden state and block states reach each looped layer as gated "
            "messages (query, key, value and MLP inputs)",
    depth_meaning="passes of the looped block (config loop_num_passes); layers before and after it run once",
    depth_key="loop_num_passes",
    max_depth=None,
    exits="after any pass of the looped block (the lens reads its output there)",
    lens="final norm, lm_head and logit soft-cap on the looped block's output after each pass (a logit lens: the "
         "post-loop layers and the final block attention residual do not run for it, so the last pass's reading is "
         "not the model's own distribution)",
    layer_names=_inkling_layer_names,
    visits=_inkling_visits,
    visit_sites=_inkling_visit_sites,
    lens_sites=_inkling_lens_sites,
    lens_head=_inkling_lens_head,
    depth_fields=_inkling_depth_fields,
    state_layer=lambda config: int(config.loop_layer_index_end) - 1,  # the looped block's output
    freeze_layers=lambda config: list(range(int(config.loop_layer_index_start), int(config.loop_layer_index_end))),
    freeze_from=2,
    freeze_meaning="at looped layer l and pass p >= 2, pass p + 1's layer l reads the messages pass p's layer l "
                   "read (pass 1 reads none, so there is nothing to keep); the layer's output is unchanged. Every "
                   "pass restarts from the pre-loop state, so a pass whose messages are kept repeats the frozen "
                   "pass: frozen at passes p..P (or at one pass p < P), the model answers as at depth p (P - 1)",
    lens_norm=lambda model: model.model.norm,
)


LOOPS: tuple[LoopDeclaration, ...] = (SST_LOOP, HRM_TEXT_LOOP, INKLING2_LOOP)


def loop_families() -> list[str]:
    """The family names, for messages."""
    return [loop.family for loop in LOOPS]


def supported_loop_model_types() -> list[str]:
    """Every ``config.model_type`` some family serves."""
    return [model_type for loop in LOOPS for model_type in loop.model_types]


def loop_for_model_type(model_type: str | None) -> LoopDeclaration:
    """The family declaration serving ``model_type``; an unknown one is a :class:`UsageError` naming the families."""
    for loop in LOOPS:
        if model_type in loop.model_types:
            return loop
    raise UsageError(f"unsupported model_type {model_type!r}; supported families: "
                     + "; ".join(f"{loop.family} ({', '.join(loop.model_types)})" for loop in LOOPS))


def native_loop(model_type: str | None) -> LoopDeclaration | None:
    """The declaration of a family transformers runs natively (not through the SST conversion), or None."""
    for loop in LOOPS:
        if loop is not SST_LOOP and model_type in loop.model_types:
            return loop
    return None
