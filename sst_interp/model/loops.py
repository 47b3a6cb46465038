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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

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
        lens_is_output: whether the lens at a depth's last iteration is the distribution the token is chosen from
            (False for a logit lens of a looped block that later layers follow: a per-position exit simulated from
            it would not be the model's answer).
        settings: ``config -> {field: value}``: the checkpoint's settings that change what a visit computes but
            that ``--depths`` does not set (Dory's KV cache mode), written into the manifest's ``loop``.
        check_model: ``model -> None``: raises :class:`UsageError` when the declaration's modules are not in the
            model (run on a weightless copy, before any weight loads).
        title: the family's display name (docs, tables).
        layer_meaning: what the recorded layer axis holds (prose, for the families table).
        exact_dtype: the dtype its exactness tests run in (for the families table).
        iterations_meaning: how often each recorded layer runs at depth D (prose, for the families table).
        wrapped: ``{wrapper model_type: key prefix}``: checkpoints saved under a wrapper (a multimodal model around
            the family's text model) whose ``text_config`` and weights under the prefix are the text model, which is
            what is recorded.
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
    lens_is_output: bool = True
    settings: Callable[[Any], dict[str, Any]] | None = None
    check_model: Callable[[Any], None] | None = None
    title: str = ""
    layer_meaning: str = ""
    exact_dtype: str = "float64"
    wrapped: dict[str, str] = field(default_factory=dict)
    iterations_meaning: str = "D everywhere"

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
            "lens_is_output": self.lens_is_output,
            "settings": self.settings(config) if self.settings is not None else {},
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
    title="SST",
    layer_meaning="the decoder layers",
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
    title="HRM-Text",
    layer_meaning="the (L_cycles + 1) x n visit slots of one H-cycle",
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
    model_types=("inkling2_loop_text", "inkling2_loop"),
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
    lens_is_output=False,
    iterations_meaning="D for the looped block, 1 elsewhere",
    title="Inkling-2 Loop",
    # the multimodal wrapper (Inkling2LoopForConditionalGeneration): its text model is recorded, the vision tower
    # is not loaded
    wrapped={"inkling2_loop": "model.language_model."},
    layer_meaning="the decoder layers",
    exact_dtype="float32",
)


# ------------------------------------------------------------------------------------------------ a looped block
def resolve_module(model: Any, path: str) -> Any:
    """The submodule of ``model`` at dotted ``path`` (``model.layers.3``); a :class:`UsageError` naming the first
    part that is missing and what the module there holds instead."""
    module = model
    for depth, part in enumerate(path.split(".")):
        child = module._modules.get(part) if hasattr(module, "_modules") else None
        if child is None:
            have = sorted(getattr(module, "_modules", {}))[:12]
            raise UsageError(f"no module {path!r} in the model: {'.'.join(path.split('.')[:depth]) or 'the model'} "
                             f"has no {part!r} (it has {', '.join(have) or 'no submodules'})")
        module = child
    return module


class _PassCounter:
    """Which iteration a call of a looped layer is: its calls counted since the model's first non-looped layer last
    ran, modulo the depth in force (the model's config field). Every forward call runs each looped layer exactly
    ``depth`` times, so the count is exact whichever keywords the model passes; one counter per set of hooks, so
    the recorder's and an intervener's hooks each count their own calls."""

    def __init__(self, model: Any, depth_key: str) -> None:
        self.model, self.depth_key, self.calls = model, depth_key, {}

    def restart(self) -> None:
        """A new forward call began (its first layer ran)."""
        self.calls.clear()

    def next(self, layer: int) -> int:
        """The iteration (1-based) of this call of looped ``layer``."""
        count = self.calls.get(layer, 0)
        self.calls[layer] = count + 1
        return count % int(getattr(self.model.config, self.depth_key)) + 1


def looped_block(*, family: str, layers: Callable[[Any], list[str]], looped: Callable[[Any], tuple[int, int]],
                 depth_key: str, head: str, norm: str | None = None, model_types: tuple[str, ...] = (),
                 carries: str = "the looped block's output feeds its next pass", depth_meaning: str | None = None,
                 max_depth: int | None = None, lens_is_output: bool = False,
                 settings: Callable[[Any], dict[str, Any]] | None = None, title: str = "",
                 exact_dtype: str = "float32") -> LoopDeclaration:
    """The declaration of a model whose layers run once, except one contiguous block that runs ``depth`` times per
    token inside one forward call (a prelude, a looped core, a coda: Dory, Huginn-style recurrent-depth models,
    ...). Everything is named by module path, so one declaration serves a family transformers ships and a model
    of your own (docs/bring-your-own.md).

    Args:
        family: the short name written into manifests.
        layers: ``config -> [module path of every layer, in the order one pass runs them]``; these are the
            recorded layer axis (a visit is a layer's output, the first element when it returns a tuple).
        looped: ``config -> (start, end)``: ``layers[start:end]`` run ``depth`` times per token, in order, pass
            after pass; the others once.
        depth_key: the config field the model reads its pass count from at every forward call (``--depths``).
        head: module path of the LM head; the lens is ``head(norm(output of the block's last layer))`` per pass.
        norm: module path of the final norm the model applies before ``head`` (None: none).
        model_types: the ``config.model_type`` values it serves (a bring-your-own declaration may leave it empty).
        carries: what carries from one pass to the next (prose).
        depth_meaning: what a depth means (prose; default: passes of the looped block, from ``depth_key``).
        max_depth: the largest depth the model can run (None: any).
        lens_is_output: True only when nothing runs after the block, so the last pass's lens is the model's own
            distribution.
        settings: config -> the settings to write into the manifest (see :class:`LoopDeclaration`).
        title: display name.
        exact_dtype: the dtype its exactness tests run in (for the families table).
    """
    if not callable(layers) or not callable(looped) or not isinstance(depth_key, str) or not isinstance(head, str):
        raise UsageError(f"{family}: looped_block needs layers (config -> module paths), looped (config -> (start, "
                         f"end)), depth_key (a config field name) and head (a module path)")

    def block(config: Any) -> tuple[int, int, int]:
        names = list(layers(config))
        start, end = (int(x) for x in looped(config))
        if not 0 <= start < end <= len(names):
            raise UsageError(f"{family}: the looped block {start}..{end - 1} is not within the {len(names)} layers "
                             f"declared ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''})")
        return start, end, len(names)

    def visits(config: Any, depth: int) -> list[tuple[int, int]]:
        start, end, total = block(config)
        return ([(1, layer) for layer in range(start)]
                + [(p, layer) for p in range(1, depth + 1) for layer in range(start, end)]
                + [(1, layer) for layer in range(end, total)])

    def visit_sites(model: Any) -> list[tuple[Any, Callable[[dict[str, Any]], tuple[int, int]]]]:
        start, end, _ = block(model.config)
        counter = _PassCounter(model, depth_key)
        sites = []
        for index, path in enumerate(layers(model.config)):
            module = resolve_module(model, path)
            if start <= index < end:
                sites.append((module, lambda kwargs, index=index: (counter.next(index), index)))
            elif index == 0:
                sites.append((module, lambda kwargs: (counter.restart(), (1, 0))[1]))
            else:
                sites.append((module, lambda kwargs, index=index: (1, index)))
        return sites

    def lens_sites(model: Any) -> list[tuple[Any, Callable[[dict[str, Any]], int]]]:
        _, end, _ = block(model.config)
        counter = _PassCounter(model, depth_key)
        # every forward call runs the block's last layer exactly `depth` times, and the recorder counts every call
        # (recorded or not), so the count modulo the depth is the pass
        return [(resolve_module(model, layers(model.config)[end - 1]), lambda kwargs: counter.next(end - 1))]

    def lens_head(model: Any, state: Any) -> Any:
        normed = resolve_module(model, norm)(state) if norm else state
        return resolve_module(model, head)(normed)

    def check_model(model: Any) -> None:
        start, end, _ = block(model.config)
        missing = []
        for path in [*layers(model.config), head, *([norm] if norm else [])]:
            try:
                resolve_module(model, path)
            except UsageError:
                missing.append(path)
        if missing:
            raise UsageError(f"{family}: the declaration's modules are not in the model: looked for "
                             f"{', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''} "
                             f"(top-level modules: {', '.join(sorted(model._modules))})")
        if not hasattr(model.config, depth_key):
            raise UsageError(f"{family}: the model's config has no field {depth_key!r} (the declared depth_key)")

    return LoopDeclaration(
        family=family, model_types=tuple(model_types), carries=carries,
        depth_meaning=depth_meaning or f"passes of the looped block per token (config {depth_key}); the layers "
                                       "before and after it run once",
        depth_key=depth_key, max_depth=max_depth,
        exits="after any pass of the looped block (the lens reads its output there)",
        lens=(f"{norm + ' then ' if norm else ''}{head} on the looped block's output after each pass"
              + ("" if lens_is_output else " (a logit lens: the layers after the block do not run for it, so the "
                                           "last pass's reading is not the model's own distribution)")),
        layer_names=lambda config: list(layers(config)), visits=visits, visit_sites=visit_sites,
        lens_sites=lens_sites, lens_head=lens_head, depth_fields=lambda config, depth: {depth_key: depth},
        state_layer=lambda config: block(config)[1] - 1,
        lens_norm=(lambda model: resolve_module(model, norm)) if norm else (lambda model: nn_identity()),
        lens_is_output=lens_is_output, settings=settings, check_model=check_model, title=title or family,
        layer_meaning="the layers, in the order one pass runs them", exact_dtype=exact_dtype,
        iterations_meaning="D for the looped block, 1 elsewhere")


def nn_identity() -> Any:
    """``torch.nn.Identity()``: the lens norm of a declaration that names none."""
    return nn.Identity()


# ------------------------------------------------------------------------------------------------ Dory
def _dory_block(config: Any) -> tuple[int, int]:
    start = int(config.n_input_layers)
    return start, start + int(config.n_recurrent_layers)


DORY_LOOP = looped_block(
    family="dory",
    model_types=("dory",),
    title="Dory",
    layers=lambda config: [f"model.layers.{i}" for i in range(int(config.num_hidden_layers))],
    looped=_dory_block,
    depth_key="n_recurrent_loops",
    norm="model.norm",
    head="lm_head",
    carries="each loop restarts from the input section's output (normed) plus the previous loop's output (normed); "
            "with recurrent_kv_cache_mode per_loop every loop attends over its own KV cache, with last_loop over "
            "the last loop's",
    depth_meaning="loops of the recurrent section (config n_recurrent_loops); the n_input_layers before it and "
                  "the n_output_layers after it run once",
    # the output layers follow the recurrent section: the lens reads the section, not the model's distribution
    lens_is_output=False,
    settings=lambda config: {"recurrent_kv_cache_mode": str(config.recurrent_kv_cache_mode)},
    exact_dtype="float64",
)


LOOPS: tuple[LoopDeclaration, ...] = (SST_LOOP, HRM_TEXT_LOOP, INKLING2_LOOP, DORY_LOOP)


def _split_loop_spec(spec: str) -> tuple[Path, str]:
    path, sep, name = str(spec).rpartition(":")
    if not sep or not path or not name.isidentifier():
        raise UsageError(f"--loop {spec!r}: expected FILE.py:NAME (a Python file and the name of the loop "
                         "declaration in it)")
    return Path(path), name


def load_loop_file(spec: str) -> LoopDeclaration:
    """The loop declaration ``NAME`` of the user's Python file, from ``--loop FILE.py:NAME``. The file runs as a
    module of its own (it may import torch, transformers and sst_interp). Refused with a :class:`UsageError`: a
    malformed spec, a missing file, a file that fails to run (its error named), a missing name, and an object that
    is not a declaration a looped model can be recorded with."""
    import importlib.util

    path, name = _split_loop_spec(spec)
    if not path.is_file():
        raise UsageError(f"--loop {spec}: no such file {path}")
    module_spec = importlib.util.spec_from_file_location(f"sst_interp_user_loop_{path.stem}", path)
    if module_spec is None or module_spec.loader is None:
        raise UsageError(f"--loop {spec}: {path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except UsageError as err:  # looped_block's own refusal of a malformed declaration
        raise UsageError(f"--loop {spec}: {err}") from err
    except Exception as err:  # the user's file is theirs: any error in it is bad input, named with its line
        raise UsageError(f"--loop {spec}: {path} failed to run: {type(err).__name__}: {err}") from err
    if not hasattr(module, name):
        found = sorted(key for key, value in vars(module).items() if isinstance(value, LoopDeclaration))
        raise UsageError(f"--loop {spec}: {path} defines no {name!r} (loop declarations in it: "
                         f"{', '.join(found) or 'none'})")
    declaration = getattr(module, name)
    if not isinstance(declaration, LoopDeclaration) or declaration.visit_sites is None \
            or declaration.lens_sites is None or declaration.lens_head is None or declaration.depth_fields is None:
        raise UsageError(f"--loop {spec}: {name} is not a loop declaration a looped model can be recorded with "
                         f"(got {type(declaration).__name__}); build it with sst_interp.model.loops.looped_block")
    return declaration


def loop_file_sha256(spec: str) -> str:
    """The sha256 of the ``--loop`` file's text (part of a run's identity)."""
    import hashlib

    return hashlib.sha256(_split_loop_spec(spec)[0].read_bytes()).hexdigest()


def families_table() -> str:
    """The Markdown table of docs/families.md, generated from :data:`LOOPS` (a test checks the page holds it), with
    the bring-your-own path as its last column."""
    def cell(loop: LoopDeclaration) -> list[str]:
        types = ", ".join([f"`{t}`" for t in loop.model_types if t not in loop.wrapped]
                          + [f"`{t}` (the wrapper: its text model)" for t in loop.wrapped])
        return [types,
                f"`{loop.depth_key}`" if loop.depth_key else "iterations of the emitting pass",
                loop.layer_meaning, loop.iterations_meaning,
                "the model's logits" if loop.lens_is_output else "a logit lens (not the model's logits)",
                loop.exact_dtype]
    rows = ["`model_type`", "`--depths D` sets", "recorded layers", "iterations per layer at depth D",
            "lens at the last iteration", "exactness tests"]
    mine = ["any, with `--loop FILE.py:NAME` (and `--trust-remote-code` for the folder's own code)",
            "the declared `depth_key`", "the declared layers, in the order one pass runs them",
            "D for the looped block, 1 elsewhere", "a logit lens unless nothing follows the block",
            "float64 (the test-only Huginn-style model)"]
    columns = [cell(loop) for loop in LOOPS] + [mine]
    lines = ["| | " + " | ".join(loop.title or loop.family for loop in LOOPS) + " | bring your own |",
             "|---" * (len(columns) + 1) + "|"]
    lines += ["| " + " | ".join([row] + [column[n] for column in columns]) + " |" for n, row in enumerate(rows)]
    return "\n".join(lines)


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
