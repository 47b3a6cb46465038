"""Halting-probe artefacts (sec:halting_probe, app:halting): evaluation, per-iteration detection, halt signal, LOOCV,
layer sweep, neuron ablations, input-dimension sweep, greedy pruning and the feature grid.

The probe is ``--probe`` when given, else a 10-neuron probe trained on the run's MUST HALT labels (paper recipe);
the neuron analysis reads a 64-neuron probe, as the paper's does.

Evidence rule (issue 12): in-sample separation (a probe scored on the timesteps it was trained on) is never evidence
of a halting feature: the in-sample tables and fig:halt_signal say so. Generalisation is read from the LOOCV
permutation p-value (the paper's binomial p is shown beside it, uncalibrated) and the layer sweep ranks layers by
held-out (question-fold cross-fitted) scores over the whole depth.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sst_interp.analyses.layers import paper_layer
from sst_interp.analyses.results import NotApplicable
from sst_interp.reporting import fig_probe
from sst_interp.reporting.artefacts import ArtefactData, ArtefactSpec, table_data
from sst_interp.reporting.context import MECHANISTIC_PROBE_WIDTH, ProbeBundle, ReportContext

FAMILY = "Halting probe"


def _with_bundle(build: Callable[[ReportContext, str | None, ProbeBundle], Any]
                 ) -> Callable[[ReportContext, str | None], Any]:
    def compute(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
        bundle = ctx.probe(target)
        if isinstance(bundle, NotApplicable):
            return bundle
        return build(ctx, target, bundle)

    compute.__doc__ = build.__doc__
    return compute


def _origin(bundle: ProbeBundle) -> str:
    return f"probe: {bundle.origin}"


def halting_probe(ctx: ReportContext, target: str | None, b: ProbeBundle) -> ArtefactData | NotApplicable:
    """tab:halting_probe with the McNemar test against iteration 1 and the chosen-depth breakdown."""
    out = b.evaluation.outcome
    n_b, n_c, p = out.mcnemar_vs_iter1()
    breakdown = out.depth_breakdown()
    notes = [_origin(b),
             f"McNemar exact one-sided vs iter=1: {n_b} wrong->right, {n_c} right->wrong, p = {p:.3g}",
             "correct answers by chosen depth: " + ", ".join(f"iter={d}: {c}" for d, c in
                                                          zip(breakdown["depth"], breakdown["correct"]))]
    return table_data(out, notes, questions=out.per_question())


def per_iter(ctx: ReportContext, target: str | None, b: ProbeBundle) -> ArtefactData | NotApplicable:
    """tab:halting_probe_per_iter."""
    det = b.evaluation.detection
    return table_data(det, [_origin(b), f"base prediction rate: {det.n_predicted_halt}/{len(det.must_halt)} = "
                                        f"{det.base_prediction_rate:.3f} of timesteps classified MUST HALT"])


def halt_signal(ctx: ReportContext, target: str | None, b: ProbeBundle) -> ArtefactData | NotApplicable:
    """fig:halt_signal: the probe's logit at every labelled timestep."""
    from sst_interp.probe.figures import halt_signal_data

    signal = halt_signal_data(b.evaluation, b.data)
    return ArtefactData({"timesteps": signal.table(), "summary": signal.summary()},
                        {"threshold": float(signal.threshold), "layer": int(b.data.layer), "origin": b.origin,
                         "in_sample": True})


def loocv_table(ctx: ReportContext, target: str | None, b: ProbeBundle) -> ArtefactData | NotApplicable:
    """LOOCV over the MUST HALT questions (app:halting_loocv): the paper's binomial p and the calibrated permutation
    p, with Cover's bound on the output layer."""
    from sst_interp.probe.loocv import DEFAULT_PERMUTATIONS, cover_bound, loocv
    from sst_interp.probe.train import TrainConfig

    b.data.labels.require_must_halt()
    result = loocv(b.data, b.probe.config, TrainConfig(), b.threshold,
                   full_predicted=b.evaluation.detection.predicted, permutations=DEFAULT_PERMUTATIONS)
    notes = [_origin(b), "each fold retrains the same architecture from scratch without one MUST HALT question",
             f"p_permutation = {result.p_permutation:.3g}: the same LOOCV rerun on {result.n_permutations} label "
             f"permutations within equal-correct-depth strata (every fold retrained); held-out accuracy under the "
             f"null {result.null_accuracy:.1%} vs observed {result.accuracy:.1%}. This is the significance to read.",
             f"p_binomial = {result.p_binomial:.3g}: the paper's test against the in-sample base rate "
             f"{result.base_rate:.1%}; it reproduces the paper's numbers but rejects where nothing is planted "
             "(the in-sample rate of a memorising probe is too low)"]
    extra = {"folds": result.folds}
    if not b.probe.is_linear:
        cover = cover_bound(b.probe.n_hidden, len(b.data.labels.must_halt_questions))
        cover_row = cover.table().iloc[0].to_dict()
        notes.append("Cover's bound: " + ", ".join(f"{k} = {v}" for k, v in cover_row.items()))
    return table_data(result, notes, **extra)


def layer_sweep(ctx: ReportContext, target: str | None, b: ProbeBundle) -> ArtefactData | NotApplicable:
    """tab:halting_probe_layer_sweep: a 64-neuron probe per layer over the whole depth, ranked by held-out scores
    (the sweep the report's probe layer is chosen from: :meth:`ReportContext.probe_sweep`)."""
    b.data.labels.require_must_halt()
    run = ctx.run_input(target).run
    sweep = ctx.probe_sweep(target)
    same = sweep.layer == int(b.data.layer)
    notes = [f"layers: {'every layer' if len(sweep.layers) == run.num_layers else 'an even grid'} of "
             f"{run.num_layers} (every layer up to 32 layers, else 16 evenly spaced including the first and last)",
             f"held-out selection: {sweep.reason}",
             f"the report's probe reads layer {b.data.layer}" + (" (the held-out selection)" if same else
                                                                 f", not the held-out choice {sweep.layer} "
                                                                 "(--probe fixes its own layer)"),
             "correct/overthinks/missed/halt_detected/safe_left_alone are in-sample (the probe scored on its own "
             "training timesteps) and are not evidence; heldout_* columns are what the layer is chosen by; "
             "significance: tab_halting_probe_loocv (permutation p)"]
    return table_data(sweep.result, notes)


def ablation_sweep(ctx: ReportContext, target: str | None, b: ProbeBundle) -> ArtefactData | NotApplicable:
    """tab:halting_probe_ablation_sweep on the 64-neuron probe."""
    from sst_interp.probe.ablation import neuron_analysis

    probe = ctx.mechanistic_probe(target)
    if isinstance(probe, NotApplicable):
        return probe
    result = neuron_analysis(probe, b.data, threshold=b.threshold)
    notes = [f"{probe.n_hidden}-neuron probe at layer {b.data.layer}"
             + (" (--probe)" if probe is b.probe else " trained here (paper recipe, seed 42)"),
             f"logit mass of the top 4 / top 10 neurons: {result.mass_share(4):.0%} / {result.mass_share(10):.0%}",
             f"effective direction vs MUST HALT input gradient: r = {result.direction_r_gradient:.4f}; vs the "
             f"direction without the top neuron: r = {result.direction_r_ablated:.4f}"]
    return table_data(result, notes, contributions=result.contribution_table())


def topk(ctx: ReportContext, target: str | None, b: ProbeBundle) -> ArtefactData | NotApplicable:
    """tab:halting_probe_topk_sweep on the frozen reported probe."""
    sweep, _ = ctx.feature_search(target)
    c, ot, miss = sweep.baseline
    return table_data(sweep, [_origin(b), f"baseline to reproduce: correct {c}, overthinks {ot}, missed {miss}",
                              f"minimal K: {sweep.minimal_k}"])


def greedy(ctx: ReportContext, target: str | None, b: ProbeBundle) -> ArtefactData | NotApplicable:
    """tab:halting_probe_greedy_prune and the linear probe on the essential set."""
    from sst_interp.probe.evaluate import evaluate_probe
    from sst_interp.probe.features import train_linear_on

    _, prune = ctx.feature_search(target)
    if isinstance(prune, NotApplicable):
        return prune
    if prune.essential.size == 0:
        # Zeroing every input leaves the probe's outcome unchanged: its decisions do not read the hidden state.
        return NotApplicable("no essential dimension: the probe's outcome stays the same with every input dimension "
                             "zeroed (it does not read the hidden state), so there is no set to prune to or to train "
                             "a linear probe on", "tab:halting_probe_greedy_prune")
    linear, _ = train_linear_on(b.data, prune.essential)
    row = evaluate_probe(linear, b.data, b.threshold).row()
    notes = [_origin(b), f"essential dimensions: {', '.join(map(str, prune.essential.tolist()))}",
             f"linear probe on them: correct {row['correct']}/{row['n_questions']}, overthinks {row['overthinks']}, "
             f"missed {row['missed']}"]
    return table_data(prune, notes)


def feature_grid(ctx: ReportContext, target: str | None, b: ProbeBundle) -> ArtefactData | NotApplicable:
    """fig:feature_position_grid: the essential dimensions on a grid of the hidden state."""
    from sst_interp.analyses.alpha import panel_grid_shape
    from sst_interp.probe.features import feature_grid as grid

    _, prune = ctx.feature_search(target)
    if isinstance(prune, NotApplicable):
        return prune
    d = b.data.hidden_size
    cols = panel_grid_shape(d)[0]
    result = grid(prune.importance, prune.essential, cols=cols)
    return ArtefactData({"essential": result.table()}, {"rows": int(result.grid.shape[0]), "cols": cols,
                                                        "d": d, "layer": int(b.data.layer)})


def _spec(name: str, kind: str, caption: str, build: Callable[..., Any], draw: Any = None,
          label: str | None = None) -> ArtefactSpec:
    paper_label = name.replace("_", ":", 1) if label is None else label
    return ArtefactSpec(name, kind, paper_label, FAMILY, caption, "run", ("run", "probe"),  # type: ignore[arg-type]
                        _with_bundle(build), draw)


SPECS: list[ArtefactSpec] = [
    _spec("tab_halting_probe", "table",
          "Halting by the probe, in sample (the probe is scored on the questions it was trained on): accuracy "
          "against iter=1 and the staged capacity, overthinks (continued past a passing depth) and misses (halted "
          "too early). Not evidence of generalisation: see the LOOCV permutation test.", halting_probe),
    _spec("tab_halting_probe_per_iter", "table",
          "MUST HALT detection and SAFE timesteps left alone, per iteration depth, in sample (not evidence of "
          "generalisation).", per_iter),
    _spec("fig_halt_signal", "figure",
          "In-sample probe logit at every labelled timestep (the probe was trained on these timesteps, so the "
          "separation shown is not evidence of a feature; see the LOOCV permutation test): histogram by class, "
          "per-question strip, and each timestep at its depth with detected halts, harmless false halts and missed "
          "continues.", halt_signal, fig_probe.draw_halt_signal),
    _spec("tab_halting_probe_loocv", "table",
          "Leave-one-MUST-HALT-question-out cross-validation: held-out questions correctly halted, with the "
          "calibrated label-permutation p (every fold retrained per permutation; read significance here) and the "
          "paper's binomial p against the in-sample base rate (reproduces the paper, not calibrated).",
          loocv_table, label=""),
    _spec("tab_halting_probe_layer_sweep", "table",
          "A 64-neuron probe trained at every layer (an even grid of 16 above 32 layers): in-sample evaluation and "
          "held-out (question-fold cross-fitted) scores; the layer is chosen by the held-out result, named in the "
          "notes.", layer_sweep),
    _spec("tab_halting_probe_ablation_sweep", "table",
          "Neuron ablations of the 64-neuron probe: keep the top-N neurons by logit contribution, remove the top "
          "neuron, or keep only it.", ablation_sweep),
    _spec("tab_halting_probe_topk_sweep", "table",
          "Inference-only input ablation: keep the top-K hidden dimensions by weight importance, zero the rest.",
          topk),
    _spec("tab_halting_probe_greedy_prune", "table",
          "Greedy pruning of the top-K set to the essential dimensions the probe cannot lose.", greedy),
    _spec("fig_feature_position_grid", "figure",
          "The essential hidden-state dimensions on a grid of the position-0 state (dim 0 at the bottom left), "
          "coloured by weight importance.", feature_grid, fig_probe.draw_feature_grid),
]
