"""What each halting-probe measurement computes from the shared steps (:mod:`sst_interp.probe.steps`): a
:class:`ProbeTable` (the analysis result with its provenance notes and the tables written beside it) or, for a
figure, :class:`~sst_interp.analyses.figure_data.FigureData`. Each function takes the analysis and its
:class:`~sst_interp.probe.steps.ProbeBundle`; :mod:`sst_interp.probe.measurements` declares the entries.

Evidence rule: in-sample separation (a probe scored on the timesteps it was trained on) is never evidence of a
halting feature; the in-sample tables and fig:halt_signal say so in their notes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from sst_interp.analyses.figure_data import FigureData
from sst_interp.kernels.results import AnalysisResult, NotApplicable
from sst_interp.probe.steps import ProbeBundle, feature_search, mechanistic_probe, probe_sweep


@dataclass(frozen=True)
class ProbeTable(AnalysisResult):
    """A probe analysis' table with the provenance notes and further tables the probe step produced.

    Args:
        result: the analysis result (its ``table()`` is the paper's layout).
        notes: provenance lines (where the probe came from, the counts behind the table).
        extra: named frames written beside the main table (per-question outcomes, LOOCV folds, contributions).
    """

    result: Any
    notes: list[str] = field(default_factory=list)
    extra: dict[str, pd.DataFrame] = field(default_factory=dict)

    def table(self) -> pd.DataFrame:
        """The paper's layout."""
        return self.result.table()


def _origin(bundle: ProbeBundle) -> str:
    return f"probe: {bundle.origin}"


def halting_probe(a: Any, b: ProbeBundle) -> ProbeTable:
    """tab:halting_probe with the McNemar test against iteration 1 and the chosen-depth breakdown."""
    out = b.evaluation.outcome
    n_b, n_c, p = out.mcnemar_vs_iter1()
    breakdown = out.depth_breakdown()
    notes = [_origin(b),
             f"McNemar exact one-sided vs iter=1: {n_b} wrong->right, {n_c} right->wrong, p = {p:.3g}",
             "correct answers by chosen depth: " + ", ".join(f"iter={d}: {c}" for d, c in
                                                          zip(breakdown["depth"], breakdown["correct"]))]
    return ProbeTable(out, notes, {"questions": out.per_question()})


def per_iter(a: Any, b: ProbeBundle) -> ProbeTable:
    """tab:halting_probe_per_iter."""
    det = b.evaluation.detection
    return ProbeTable(det, [_origin(b), f"base prediction rate: {det.n_predicted_halt}/{len(det.must_halt)} = "
                                        f"{det.base_prediction_rate:.3f} of timesteps classified MUST HALT"])


def halt_signal(a: Any, b: ProbeBundle) -> FigureData:
    """fig:halt_signal: the probe's logit at every labelled timestep."""
    from sst_interp.probe.figures import halt_signal_data

    signal = halt_signal_data(b.evaluation, b.data)
    return FigureData({"timesteps": signal.table(), "summary": signal.summary()},
                      {"threshold": float(signal.threshold), "layer": int(b.data.layer), "origin": b.origin,
                       "in_sample": True}, main="timesteps")


def loocv_table(a: Any, b: ProbeBundle) -> ProbeTable:
    """LOOCV over the MUST HALT questions (app:halting_loocv): the paper's binomial p and the calibrated permutation
    p, with Cover's bound on the output layer."""
    from sst_interp.probe.loocv import DEFAULT_PERMUTATIONS, cover_bound, loocv
    from sst_interp.probe.train import TrainConfig

    b.data.labels.require_must_halt()
    result = loocv(b.data, b.probe.config, TrainConfig(), b.threshold,
                   full_predicted=b.evaluation.detection.predicted, permutations=DEFAULT_PERMUTATIONS)
    if result.n_permutations:
        permuted = (f"p_permutation = {result.p_permutation:.3g}: the same LOOCV rerun on {result.n_permutations} "
                    f"label permutations (of at most {DEFAULT_PERMUTATIONS}) within equal-correct-depth strata, every "
                    f"fold retrained; held-out accuracy under the null {result.null_accuracy:.1%} vs observed "
                    f"{result.accuracy:.1%}. This is the significance to read. Why it stopped: "
                    f"{result.permutation_stop}")
    else:
        permuted = f"p_permutation = {result.p_permutation:.3g}: {result.permutation_stop}"
    notes = [_origin(b), "each fold retrains the same architecture from scratch without one MUST HALT question",
             permuted,
             f"label arrangements the strata allow (counted before training): {result.arrangements_float:.4g}; the "
             f"smallest exact permutation p is their inverse",
             f"p_binomial = {result.p_binomial:.3g}: the paper's test against the in-sample base rate "
             f"{result.base_rate:.1%}; it reproduces the paper's numbers but rejects where nothing is planted "
             "(the in-sample rate of a memorising probe is too low)"]
    if not b.probe.is_linear:
        cover = cover_bound(b.probe.n_hidden, len(b.data.labels.must_halt_questions))
        cover_row = cover.table().iloc[0].to_dict()
        notes.append("Cover's bound: " + ", ".join(f"{k} = {v}" for k, v in cover_row.items()))
    return ProbeTable(result, notes, {"folds": result.folds})


def layer_sweep(a: Any, b: ProbeBundle) -> ProbeTable:
    """tab:halting_probe_layer_sweep: a 64-neuron probe per layer over the whole depth, ranked by held-out scores
    (the sweep the reported probe's layer is chosen from: :func:`probe_sweep`)."""
    b.data.labels.require_must_halt()
    run = a.run
    sweep = probe_sweep(a)
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
    return ProbeTable(sweep.result, notes)


def ablation_sweep(a: Any, b: ProbeBundle) -> ProbeTable | NotApplicable:
    """tab:halting_probe_ablation_sweep on the 64-neuron probe."""
    from sst_interp.probe.ablation import neuron_analysis

    probe = mechanistic_probe(a)
    if isinstance(probe, NotApplicable):
        return probe
    result = neuron_analysis(probe, b.data, threshold=b.threshold)
    notes = [f"{probe.n_hidden}-neuron probe at layer {b.data.layer}"
             + (" (--probe)" if probe is b.probe else " trained here (paper recipe, seed 42)"),
             f"logit mass of the top 4 / top 10 neurons: {result.mass_share(4):.0%} / {result.mass_share(10):.0%}",
             f"effective direction vs MUST HALT input gradient: r = {result.direction_r_gradient:.4f}; vs the "
             f"direction without the top neuron: r = {result.direction_r_ablated:.4f}"]
    return ProbeTable(result, notes, {"contributions": result.contribution_table()})


def topk(a: Any, b: ProbeBundle) -> ProbeTable:
    """tab:halting_probe_topk_sweep on the frozen reported probe."""
    sweep, _ = feature_search(a)
    c, ot, miss = sweep.baseline
    return ProbeTable(sweep, [_origin(b), f"baseline to reproduce: correct {c}, overthinks {ot}, missed {miss}",
                              f"minimal K: {sweep.minimal_k}"])


def greedy(a: Any, b: ProbeBundle) -> ProbeTable | NotApplicable:
    """tab:halting_probe_greedy_prune and the linear probe on the essential set."""
    _, prune = feature_search(a)
    if isinstance(prune, NotApplicable):
        return prune
    return greedy_table(prune, b)


def greedy_table(prune: Any, b: ProbeBundle) -> ProbeTable | NotApplicable:
    """The greedy-prune table of ``prune`` (a :class:`~sst_interp.probe.features.GreedyPrune`), or why there is
    none: with no essential dimension the probe's outcome does not read the hidden state."""
    from sst_interp.probe.evaluate import evaluate_probe
    from sst_interp.probe.features import train_linear_on

    if prune.essential.size == 0:
        return NotApplicable("no essential dimension: the probe's outcome stays the same with every input dimension "
                             "zeroed (it does not read the hidden state), so there is no set to prune to or to train "
                             "a linear probe on", "tab:halting_probe_greedy_prune")
    linear, _ = train_linear_on(b.data, prune.essential)
    row = evaluate_probe(linear, b.data, b.threshold).row()
    notes = [_origin(b), f"essential dimensions: {', '.join(map(str, prune.essential.tolist()))}",
             f"linear probe on them: correct {row['correct']}/{row['n_questions']}, overthinks {row['overthinks']}, "
             f"missed {row['missed']}"]
    return ProbeTable(prune, notes)


def feature_grid(a: Any, b: ProbeBundle) -> FigureData | NotApplicable:
    """fig:feature_position_grid: the essential dimensions on a grid of the hidden state."""
    from sst_interp.analyses.alpha import panel_grid_shape
    from sst_interp.probe.features import feature_grid as grid

    _, prune = feature_search(a)
    if isinstance(prune, NotApplicable):
        return prune
    d = b.data.hidden_size
    cols = panel_grid_shape(d)[0]
    result = grid(prune.importance, prune.essential, cols=cols)
    return FigureData({"essential": result.table()}, {"rows": int(result.grid.shape[0]), "cols": cols, "d": d,
                                                      "layer": int(b.data.layer)})
