"""Attribution patching over layer x position x iteration: a first-order estimate of every site's patching effect
from one forward and one backward pass, then the top sites verified by real patching.

A metric M is read at each row's target (a generated position T, final iteration): the log-probability of the
target token, or, with foils, the logit difference target - foil. Tokens before T are forced to the target's
prefix (as in causal tracing, :mod:`sst_interp.experiments.trace`), so a patch changes the model's states, never
the context M is read in, and M is a smooth function of every state.

Patching site s = (layer l, position p, iteration i) puts a reference state r_s in place of the layer's output o_s
there (``layer_out``: what the next layer reads and what the next pass carries). To first order::

    M(patched) - M(clean) ~= dM/do_s . (r_s - o_s)

The gradient dM/do_s is the total derivative through every later layer, iteration, position, KV entry and carried
state. One pass with autograd on (:class:`~sst_interp.model.generation.GenerationSession` ``gradients``) adds a zero
leaf to each site's output (the forward is unchanged bit for bit) and one ``torch.autograd.grad`` call returns the
gradient at every site at once; the model's own parameters are taken out of the graph for the pass. The
reference states come from a recorded run through the operations ``patch``, ``mean`` and ``resample``
(:class:`~sst_interp.interventions.references.ReferenceStates`), the same ones real patching uses, so each estimate
has a real counterpart: the same operation at that one site (:func:`patch_effects`), one forced generation per site.

The estimate is exact to first order: scaling the patch to o + eps (r - o) (the operation's ``scale``) makes the
real effect eps * estimate + O(eps^2) (tests/unit/experiments/test_attribution.py checks the error falls by 4 per
halving of eps on a float64 model).

Gradients through a quantised model without a LoRA adapter are refused (:func:`check_gradients`). On a natively
looping family the leaves sit on its visit modules and the gradient runs through every visit of its loop
(:class:`~sst_interp.experiments.families.FamilyGradientTap`); a (layer, source iteration) the reference depth never
visits is not estimated.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from sst_interp.experiments import manifest as files
from sst_interp.experiments.configs import AttributionConfig
from sst_interp.experiments.families import (
    FamilyGradientTap,
    family_of,
    forced_generation,
    gradients_everywhere,
    tap_last_column,
    visited_iterations,
)
from sst_interp.experiments.setup import generation_config, record_condition
from sst_interp.experiments.tables import (
    ATTRIBUTION_CELLS,
    ATTRIBUTION_EFFECTS,
    ATTRIBUTION_TIMING,
    ATTRIBUTION_VERIFIED,
    ATTRIBUTION_VERIFIED_COLUMNS,
)
from sst_interp.experiments.trace import Target, find_targets, prompt_ids
from sst_interp.interventions import Intervener, Intervention, InterventionSpec, Operation, Site, intervene
from sst_interp.interventions.references import ReferenceStates
from sst_interp.kernels.errors import UsageError
from sst_interp.model.depth_policy import FixedDepth
from sst_interp.model.generation import GenerationConfig, GenerationSession
from sst_interp.model.observers import ObserverGroup
from sst_interp.store import Run

#: a site's coordinates: (position, iteration, layer), turn 0
SiteKey = tuple[int, int, int]


def check_gradients(sst: Any) -> None:
    """UsageError (one line) when gradients cannot be asked of ``sst``: its backbone is quantised (transformers'
    ``is_quantized``/``hf_quantizer``, or integer weights) and carries no LoRA adapter to differentiate through."""
    backbone = sst.backbone
    named = list(backbone.named_parameters())
    quantised = (bool(getattr(backbone, "is_quantized", False)) or getattr(backbone, "hf_quantizer", None) is not None
                 or any(not p.dtype.is_floating_point for _, p in named))
    lora = any("lora_" in name for name, _ in named)
    if quantised and not lora:
        raise UsageError("attribution patching needs gradients through the model, and this backbone is quantised "
                         "without a LoRA adapter; load it unquantised (--dtype float32 or bfloat16) or with its LoRA "
                         "checkpoint, or verify sites by real patching (trace)")


@dataclass
class SiteGradients:
    """One attribution pass over a batch.

    Args:
        question_ids: per row, its question (None: a row without a target).
        depth: the depth the pass ran at.
        metric: [B] float64, M per row (NaN without a target).
        states: per site (position, iteration, layer), the clean ``layer_out`` of its last column, [B, d] float64.
        grads: per site, dM/d``layer_out`` there, [B, d] float64 (zero where M does not depend on the site: rows
            whose target is earlier).
        seconds: wall time of the forward and backward passes.
    """

    question_ids: list[str | None]
    depth: int
    metric: np.ndarray
    states: dict[SiteKey, torch.Tensor] = field(default_factory=dict)
    grads: dict[SiteKey, torch.Tensor] = field(default_factory=dict)
    seconds: float = 0.0


class _ForcedSession(GenerationSession):
    """Generation whose tokens before each row's target are that target's prefix (the context M is read in)."""

    def __init__(self, *args: Any, targets: Sequence[Target | None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.targets = list(targets)

    def record_token(self, position: int, token: torch.Tensor, counts: list[int] | None = None) -> None:
        token = token.clone()
        for row, target in enumerate(self.targets):
            if target is not None and position < target.position:
                token[row] = target.prefix[position]
        super().record_token(position, token, counts)


class _MetricCapture:
    """Observer: M of each row at its target position, final iteration, as a tensor (with its graph when the pass
    runs with autograd on)."""

    def __init__(self, targets: Sequence[Target | None], depth: int, foils: Sequence[int | None] | None) -> None:
        self.targets = list(targets)
        self.depth = depth
        self.foils = list(foils) if foils is not None else [None] * len(self.targets)
        self.values: list[torch.Tensor | None] = [None] * len(self.targets)

    def on_pass_start(self, info: Any) -> None:
        """Observer: nothing to do."""

    def on_token(self, position: int, token_ids: Any, active: Any) -> None:
        """Observer: nothing to do."""

    def on_pass_end(self, info: Any, logits: torch.Tensor | None) -> None:
        """Observer: at a target's position and the final iteration, keep its M (float64)."""
        if info.position is None or logits is None or info.iteration != self.depth:
            return
        for row, target in enumerate(self.targets):
            if target is not None and target.position == info.position:
                row_logits = logits[row].double()
                foil = self.foils[row]
                self.values[row] = (row_logits[target.token] - row_logits[foil] if foil is not None
                                    else torch.log_softmax(row_logits, dim=-1)[target.token])

    def array(self) -> np.ndarray:
        """[B] float64: M per row (NaN for rows without a target)."""
        return np.array([float("nan") if v is None else float(v.detach()) for v in self.values])


class _GradientTap(Intervener):
    """An empty spec's Intervener (every stream passes through unchanged) that adds a zero leaf [B, 1, d] to the last
    column of ``layer_out`` at each wanted site, so that dM/d(leaf) is dM/d``layer_out`` there."""

    def __init__(self, sst: Any, layers: Sequence[int], last_position: int) -> None:
        super().__init__(sst, InterventionSpec())
        self.layers = set(int(layer) for layer in layers)
        self.last_position = int(last_position)
        self.leaves: dict[SiteKey, torch.Tensor] = {}
        self.states: dict[SiteKey, torch.Tensor] = {}

    def layer_out(self, layer: int, value: torch.Tensor) -> torch.Tensor:
        """The layer's output, plus a zero leaf at a wanted site (the same values, now differentiable there)."""
        if self._coords is None or layer not in self.layers:
            return value
        turn, position, iteration = self._coords
        if turn != 0 or position > self.last_position:
            return value
        return tap_last_column(self.leaves, self.states, (position, iteration, layer), value)


@contextmanager
def _installed(sst: Any, hook: Intervener) -> Iterator[None]:
    """``hook`` as the model's intervention for the block (refused while another is active; removed on exit)."""
    context = sst.context
    if context.intervention is not None:
        raise UsageError("an intervention is already active on this model; attribute outside it")
    context.intervention = hook
    try:
        yield
    finally:
        context.intervention = None


@contextmanager
def _parameters_frozen(sst: Any) -> Iterator[None]:
    """The model's parameters out of autograd for the block (the graph then starts at the sites' leaves, and the
    forward saves nothing for weight gradients); each parameter's flag is restored on exit."""
    # an SST is a module holding its backbone; a family's LoopModel holds the backbone module
    params = list((sst if isinstance(sst, torch.nn.Module) else sst.backbone).parameters())
    flags = [p.requires_grad for p in params]
    try:
        for p in params:
            p.requires_grad_(False)
        yield
    finally:
        for p, flag in zip(params, flags):
            p.requires_grad_(flag)


def _forced_config(config: GenerationConfig, targets: Sequence[Target | None]) -> GenerationConfig:
    wanted = [t.position for t in targets if t is not None]
    if not wanted:
        raise UsageError("no row has a target: nothing to measure")
    # M is read at the final iteration only: no LM head at the others (they would join the graph for nothing)
    return dataclasses.replace(config, max_new_tokens=max(wanted) + 1, stop_strings=(), logits_every_iteration=False)


def attribution_pass(sst: Any, prompts: list[list[int]], targets: Sequence[Target | None], depth: int,
                     config: GenerationConfig, question_ids: Sequence[str | None] | None = None,
                     layers: Sequence[int] | None = None, foils: Sequence[int | None] | None = None) -> SiteGradients:
    """One forward pass (forced, at ``depth``, autograd on) and one backward pass: the clean state and dM/dstate at
    every site (turn 0, positions 0..the last target, every iteration, ``layers``; default all).

    Args:
        sst: the model (float weights, or quantised with LoRA: :func:`check_gradients`).
        prompts: token ids per row.
        targets: per row, its :class:`~sst_interp.experiments.trace.Target` (None: not measured).
        depth: iterations per position.
        config: generation options (prompt mode, padding, EOS); ``max_new_tokens`` and stop strings are set here.
        question_ids: per row (default: each target's question).
        layers: the layers attributed.
        foils: per row, a token whose logit is subtracted (M = logit difference); None: M = log-prob.
    """
    check_gradients(sst)
    ids = list(question_ids) if question_ids is not None else [None if t is None else t.question_id for t in targets]
    layers = list(range(sst.num_layers)) if layers is None else list(layers)
    forced = _forced_config(config, targets)
    capture = _MetricCapture(targets, depth, foils)
    started = time.perf_counter()
    if family_of(sst) is not None:
        grads, tap = _family_gradients(sst, prompts, targets, depth, forced, capture, layers)
        keys = list(tap.leaves)
    else:
        tap = _GradientTap(sst, layers, forced.max_new_tokens - 1)
        with _parameters_frozen(sst), _installed(sst, tap), \
                _ForcedSession(sst, prompts, FixedDepth(depth), forced, ObserverGroup(tap, capture), gradients=True,
                               targets=targets) as session:
            session.run_turn()
            measured = [v for v in capture.values if v is not None]
            keys = list(tap.leaves)
            grads = torch.autograd.grad(torch.stack(measured).sum(), [tap.leaves[k] for k in keys],
                                        allow_unused=True)
    seconds = time.perf_counter() - started
    out = SiteGradients(ids, depth, capture.array(), tap.states, {}, seconds)
    for key, grad in zip(keys, grads):
        # None: no path from this site to any M (its position is after every target it could reach)
        out.grads[key] = (torch.zeros_like(out.states[key]) if grad is None
                          else grad[:, 0, :].detach().to("cpu", torch.float64))
    return out


def _family_gradients(model: Any, prompts: list[list[int]], targets: Sequence[Target | None], depth: int,
                      forced: GenerationConfig, capture: _MetricCapture,
                      layers: Sequence[int]) -> tuple[tuple[torch.Tensor | None, ...], Any]:
    """The attribution pass of a natively looping family: the forced generation with a
    :class:`~sst_interp.experiments.families.FamilyGradientTap` on its visit modules, autograd on through every
    visit (:func:`~sst_interp.experiments.families.gradients_everywhere`), then one backward. Returns (the gradient
    per leaf, in the tap's order; the tap)."""
    tap = FamilyGradientTap(model, layers, forced.max_new_tokens - 1)
    tap.install()
    try:
        with _parameters_frozen(model), gradients_everywhere(model, depth):
            forced_generation(model, prompts, targets, depth, forced, ObserverGroup(tap, capture), gradients=True)
        measured = [v for v in capture.values if v is not None]
        grads = torch.autograd.grad(torch.stack(measured).sum(), [tap.leaves[k] for k in tap.leaves],
                                    allow_unused=True)
    finally:
        tap.remove()
    return grads, tap


def metric_values(sst: Any, prompts: list[list[int]], targets: Sequence[Target | None], depth: int,
                  config: GenerationConfig, spec: InterventionSpec | None = None,
                  question_ids: Sequence[str | None] | None = None,
                  foils: Sequence[int | None] | None = None) -> np.ndarray:
    """[B] float64: M per row of one forced generation at ``depth`` (no gradients), under ``spec`` when given (real
    patching: the existing :class:`~sst_interp.interventions.apply.Intervener`)."""
    ids = list(question_ids) if question_ids is not None else [None if t is None else t.question_id for t in targets]
    forced = _forced_config(config, targets)
    capture = _MetricCapture(targets, depth, foils)
    policy = FixedDepth(depth)
    if family_of(sst) is not None:
        forced_generation(sst, prompts, targets, depth, forced, capture, spec, ids)
    elif spec is None:
        with _ForcedSession(sst, prompts, policy, forced, capture, targets=targets) as session:
            session.run_turn()
    else:
        with intervene(sst, spec, ids) as intervener, \
                _ForcedSession(sst, prompts, policy, forced, ObserverGroup(intervener, capture),
                               targets=targets) as session:
            session.run_turn()
    return capture.array()


def site_spec(operation: Operation, layer: int, position: int, iteration: int) -> InterventionSpec:
    """``operation`` at one ``layer_out`` site (turn 0): what an estimate of that site stands for."""
    site = Site("layer_out", layers=(layer,), positions=(position,), iterations=(iteration,), turns=(0,))
    return InterventionSpec((Intervention(site, operation),))


def estimates(gradients: SiteGradients, operation: Operation, targets: Sequence[Target | None], sst: Any,
              source_iterations: Sequence[int | None] = (None,)) -> pd.DataFrame:
    """First-order patching effects: per row with a target and per site at or before its target position, the
    gradient dotted with (reference - clean state), times the operation's ``scale``.

    Args:
        gradients: one :func:`attribution_pass`.
        operation: ``patch``, ``mean`` or ``resample`` (reading a recorded run).
        targets: the pass's targets, per row.
        sst: the model (the reference run is checked against its size).
        source_iterations: for ``patch``/``resample``, the reference iterations to estimate for (None: the site's
            own iteration); one estimate per site and source iteration from the same gradient.

    Returns:
        One row per (question, layer, position, iteration, source_iteration): ``estimate`` (nats, or logit units
        under a logit difference), ``gradient_norm``, ``delta_norm`` (|reference - clean|).
    """
    rows = []
    references = {}
    # a layer's reference exists only at the iterations the reference depth visits it (a family's layer outside
    # its loop: iteration 1); other (layer, source iteration) pairs are not estimated
    reference_depth = operation.depth or gradients.depth
    visited = visited_iterations(sst, reference_depth)
    for source_iteration in source_iterations:
        chosen = dataclasses.replace(operation, source_iteration=source_iteration) if source_iteration else operation
        references[source_iteration] = (chosen, ReferenceStates(chosen, sst.num_layers, sst.hidden_size))
    for (position, iteration, layer), grad in sorted(gradients.grads.items()):
        state = gradients.states[(position, iteration, layer)]
        ids = [q if t is not None and t.position >= position else None
               for q, t in zip(gradients.question_ids, targets)]
        if all(q is None for q in ids):
            continue
        for source_iteration, (chosen, reference) in references.items():
            if (source_iteration or iteration) not in visited[layer]:
                continue
            values = reference.values(ids, gradients.depth, 0, position, iteration, layer).double()
            delta = values - state
            effect = float(chosen.scale) * (grad * delta).sum(-1)
            for row, question in enumerate(ids):
                if question is None:
                    continue
                rows.append({"question_id": question, "layer": layer, "position": position, "iteration": iteration,
                             "source_iteration": source_iteration or iteration, "estimate": float(effect[row]),
                             "gradient_norm": float(grad[row].norm()), "delta_norm": float(delta[row].norm())})
    return pd.DataFrame(rows, columns=["question_id", "layer", "position", "iteration", "source_iteration",
                                       "estimate", "gradient_norm", "delta_norm"])


def patch_effects(sst: Any, prompts: list[list[int]], targets: Sequence[Target | None], depth: int,
                  config: GenerationConfig, operation: Operation, sites: Sequence[tuple[int, int, int, int]],
                  clean: np.ndarray | None = None, question_ids: Sequence[str | None] | None = None,
                  foils: Sequence[int | None] | None = None) -> pd.DataFrame:
    """Real patching of each site (layer, position, iteration, source_iteration): one forced generation per site
    with ``operation`` there, its M minus the clean M, per row whose target is at or after the site's position.

    Returns:
        One row per (question, layer, position, iteration, source_iteration) with ``real`` and ``seconds`` (the
        site's generation).
    """
    ids = list(question_ids) if question_ids is not None else [None if t is None else t.question_id for t in targets]
    base = metric_values(sst, prompts, targets, depth, config, None, ids, foils) if clean is None else clean
    rows = []
    for layer, position, iteration, source_iteration in sites:
        reached = [q if t is not None and t.position >= position else None for q, t in zip(ids, targets)]
        if all(q is None for q in reached):
            continue
        chosen = (dataclasses.replace(operation, source_iteration=source_iteration)
                  if source_iteration != iteration else operation)
        started = time.perf_counter()
        patched = metric_values(sst, prompts, targets, depth, config, site_spec(chosen, layer, position, iteration),
                                reached, foils)
        seconds = time.perf_counter() - started
        rows += [{"question_id": q, "layer": layer, "position": position, "iteration": iteration,
                  "source_iteration": source_iteration, "real": float(patched[row] - base[row]), "seconds": seconds}
                 for row, q in enumerate(reached) if q is not None]
    return pd.DataFrame(rows, columns=["question_id", "layer", "position", "iteration", "source_iteration", "real",
                                       "seconds"])


# ---------------------------------------------------------------------------------------------- the experiment
EFFECTS, CELLS, VERIFIED, TIMING = ATTRIBUTION_EFFECTS, ATTRIBUTION_CELLS, ATTRIBUTION_VERIFIED, ATTRIBUTION_TIMING


def run_attribution(setup: Any, out: Path, config: AttributionConfig) -> dict[str, pd.DataFrame]:
    """Record the clean run (depths 1 and k), attribute every (layer, position, source iteration) cell with one
    gradient per batch of depth-1 forced passes, verify the top cells by real patching, and write the tables and
    ``experiment-attribute.json`` under ``out``.

    Returns:
        {``attribution_effects``: one row per (question, layer, position, source iteration): the estimate;
        ``attribution_cells``: their mean per cell with the question count;
        ``attribution_verified``: the top cells' mean estimate beside the mean real patching effect;
        ``attribution_timing``: per batch, the seconds of a clean forced pass, of the attribution pass (forward and
        backward) and of one real patching generation per verified cell}.
    """

    check_gradients(setup.sst)
    config.check(setup.num_layers, setup.base.full_positions)
    k = config.depth
    layers = list(config.layers) if config.layers is not None else list(range(setup.num_layers))
    clean_path = record_condition(setup, out, "clean", [1, k])
    targets, skipped = find_targets(Run.open(clean_path), k, config.positions, config.target_position)
    print(f"[attribute: {len(targets)} of {len(targets) + len(skipped)} questions have a target]")
    generation = generation_config(setup)
    patch = Operation("patch", run=str(clean_path), depth=k)
    size = setup.base.batch_size
    batches = []
    for start in range(0, len(setup.questions), size):
        questions = setup.questions[start: start + size]
        wanted = [targets.get(q.question_id) for q in questions]
        if any(t is not None for t in wanted):
            batches.append(([prompt_ids(setup, q) for q in questions], wanted))
    effects, timing, clean_metrics = [], [], []
    for prompts, wanted in batches:
        started = time.perf_counter()
        clean = metric_values(setup.sst, prompts, wanted, 1, generation)
        clean_seconds = time.perf_counter() - started
        gradients = attribution_pass(setup.sst, prompts, wanted, 1, generation, layers=layers)
        effects.append(estimates(gradients, patch, wanted, setup.sst, source_iterations=tuple(range(1, k + 1))))
        clean_metrics.append(clean)
        timing.append({"rows": sum(t is not None for t in wanted), "sites": len(gradients.grads),
                       "clean_pass_s": clean_seconds, "attribution_pass_s": gradients.seconds})
    frame = pd.concat(effects, ignore_index=True) if effects else pd.DataFrame(
        columns=["question_id", "layer", "position", "iteration", "source_iteration", "estimate", "gradient_norm",
                 "delta_norm"])
    cells = (frame.groupby(["layer", "position", "source_iteration"])["estimate"].agg(["mean", "count"])
             .reset_index().rename(columns={"mean": "estimate_mean", "count": "n_questions"}))
    top = cells.reindex(cells["estimate_mean"].abs().sort_values(ascending=False).index).head(config.verify_top)
    verified = []
    for cell in top.itertuples():
        site = [(int(cell.layer), int(cell.position), 1, int(cell.source_iteration))]
        real, seconds = [], 0.0
        for (prompts, wanted), clean in zip(batches, clean_metrics):
            measured = patch_effects(setup.sst, prompts, wanted, 1, generation, patch, site, clean)
            real.append(measured)
            seconds += float(measured["seconds"].iloc[0]) if len(measured) else 0.0
        real_frame = pd.concat(real, ignore_index=True)
        verified.append({"layer": int(cell.layer), "position": int(cell.position),
                         "source_iteration": int(cell.source_iteration), "n_questions": len(real_frame),
                         "estimate_mean": float(cell.estimate_mean), "real_mean": float(real_frame["real"].mean()),
                         "real_patching_s": seconds})
    verified_frame = pd.DataFrame(verified, columns=list(ATTRIBUTION_VERIFIED_COLUMNS))
    timing_frame = pd.DataFrame(timing, columns=["rows", "sites", "clean_pass_s", "attribution_pass_s"])
    timing_frame["ratio"] = timing_frame["attribution_pass_s"] / timing_frame["clean_pass_s"]
    tables = {EFFECTS: frame, CELLS: cells.sort_values(["layer", "position", "source_iteration"]).reset_index(
        drop=True), VERIFIED: verified_frame, TIMING: timing_frame}
    written = {name: files.write_table(out, name, table) for name, table in tables.items()}
    conditions = {"clean": files.condition_entry(out, clean_path, None)}
    files.write_manifest(out, "attribute", config, setup.base, conditions, written)
    return tables
