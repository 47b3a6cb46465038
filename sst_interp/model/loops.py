"""The loop declarations of the families sst-interp records (:data:`LOOPS`: SST, HRM-Text, Inkling-2 Loop, Dory),
and the lookups from a model type to its family.

Each family is one :class:`~sst_interp.model.loop_declaration.LoopDeclaration` (what the declaration holds: that
module); Dory is built with :func:`~sst_interp.model.looped_block.looped_block`, the builder a user's own looped
model also uses (``record --loop``, :mod:`sst_interp.model.loop_file`); both stay importable from here, where a
user's ``--loop`` file imports them (``from sst_interp.model.loops import looped_block``, docs/bring-your-own.md).

Visit order per generated token, for the three families (``n`` layers per HRM stack, ``L`` = ``L_cycles``)::

    SST, depth k:            for i in 1..k:  layers 0..N-1                        (a rerun of the emitting pass)
    HRM-Text, depth D:       for h in 1..D:  for l in 0..L-1: L-stack 0..n-1 ;  H-stack 0..n-1
                             recorded layer of L-visit l, block j = l*n + j;  of the H visit = L*n + j
    Inkling-2 Loop, depth P: layers 0..s-1 ; for p in 1..P: layers s..e-1 ; layers e..N-1
                             (layers outside s..e-1 hold iteration 1 only)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sst_interp.kernels.errors import UsageError
from sst_interp.model.adapters import supported_model_types
from sst_interp.model.loop_declaration import LoopDeclaration
from sst_interp.model.looped_block import looped_block


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


def _hrm_kv_slots(config: Any, depth: int) -> dict[str, int]:
    # num_hidden_layers counts KV slots (one per stack block per visit): DynamicCache(config=...) sizes from it
    return {"num_hidden_layers": int(config.num_layers_per_stack) * depth * (int(config.L_cycles) + 1)}


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
    depth_follows=_hrm_kv_slots,
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
    # per_loop or last_loop, read by the model at every forward call: settable with --loop-option, and written into
    # the manifest's loop.settings
    options=("recurrent_kv_cache_mode",),
    exact_dtype="float64",
)


LOOPS: tuple[LoopDeclaration, ...] = (SST_LOOP, HRM_TEXT_LOOP, INKLING2_LOOP, DORY_LOOP)


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
