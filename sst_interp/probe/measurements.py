"""The halting probe's measurements (sec:halting_probe, app:halting) as catalogue entries.

The probe sits above :mod:`sst_interp.analyses`, so its tables and figures are declared here (:data:`MEASUREMENTS`),
and :mod:`sst_interp.catalogue` gathers them with every other family's.
Everything else works as for any measurement: ``a = analyses.open(run, probe=PATH)``, then ``a.data("tab:halting_probe")``,
``a.table(...)``, ``a.notes(...)``, ``a.available()``, and the report's probe artefacts are adapters over the same
entries.

The probe is ``probe=`` when given, else a 10-neuron probe trained on the run's MUST HALT labels (paper recipe) at the
layer the held-out layer sweep chooses; the neuron analysis reads a 64-neuron probe, as the paper's does. Everything
below is computed once per :class:`~sst_interp.analyses.RunAnalysis` (its ``memo``).

Evidence rule: in-sample separation (a probe scored on the timesteps it was trained on) is never evidence of a
halting feature; the in-sample tables and fig:halt_signal say so. Generalisation is read from the LOOCV permutation
p-value and the layer sweep ranks layers by held-out (question-fold cross-fitted) scores.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from sst_interp.analyses import sections, tidy
from sst_interp.analyses.figure_data import FigureData
from sst_interp.analyses.measurement import Measurement
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.results import AnalysisResult, NotApplicable

#: Width of the reported halting probe and of the probe the neuron analysis reads (paper sec:halting_probe_method).
REPORTED_PROBE_WIDTH = 10
MECHANISTIC_PROBE_WIDTH = 64


@dataclass(frozen=True)
class ProbeBundle:
    """The halting probe of one run and its evaluation.

    Args:
        data: labels and position-0 states at the probe layer (:class:`~sst_interp.probe.ProbeData`).
        probe: the probe (loaded from ``probe=`` or trained here).
        threshold: halting threshold on the logit.
        origin: one line saying where the probe came from.
        evaluation: :class:`~sst_interp.probe.evaluate.ProbeEvaluation` of the probe on ``data``.
    """

    data: Any
    probe: Any
    threshold: float
    origin: str
    evaluation: Any


@dataclass(frozen=True)
class ProbeSweep:
    """The layer sweep of one run and its held-out layer choice.

    Args:
        result: :class:`~sst_interp.probe.sweeps.LayerSweep` (in-sample and ``heldout_*`` columns per layer).
        layer: the layer the held-out scores select.
        reason: one line saying why.
        data: ``{layer: ProbeData}`` of the swept layers.
        layers: the swept layers (the whole depth: every layer up to 32, else an even grid of 16).
    """

    result: Any
    layer: int
    reason: str
    data: dict
    layers: list[int]


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


# ------------------------------------------------------------------------------------------------ shared steps
def probe_bundle(a: Any) -> ProbeBundle | NotApplicable:
    """The run's halting probe (``a.probe`` when given, else a 10-neuron probe trained on the run's labels at the
    held-out sweep's layer) and its evaluation; computed once per analysis."""
    return a.memo("probe:bundle", lambda: _bundle(a))


def _bundle(a: Any) -> ProbeBundle | NotApplicable:
    from sst_interp.probe import load_probe, load_probe_data
    from sst_interp.probe.evaluate import evaluate_probe
    from sst_interp.probe.model import DEFAULT_THRESHOLD, ProbeConfig
    from sst_interp.probe.train import TrainConfig, train_probe

    label, run = "tab:halting_probe", a.run
    if a.probe is not None:
        probe, meta = load_probe(a.probe)
        if probe.config.input_size != run.hidden_size or not 0 <= meta.layer < run.num_layers:
            return NotApplicable(f"--probe {a.probe} reads layer {meta.layer} of width {probe.config.input_size}; "
                                 f"run {a.name} has {run.num_layers} layers of width {run.hidden_size}", label)
        data = load_probe_data(run, meta.layer)
        origin = f"--probe {a.probe} (layer {meta.layer})"
        threshold = float(meta.threshold)
    else:
        data = load_probe_data(run)
        if data.labels.n_must_halt == 0:
            return NotApplicable("the run has no MUST HALT timesteps (no question passes at its staged depth and "
                                 "fails at the next flat depth); pass --probe to evaluate a trained probe", label)
        if data.labels.n_safe == 0:
            return NotApplicable("the run has no SAFE timesteps; a probe needs both classes", label)
        sweep = probe_sweep(a)
        layer, reason = sweep.layer, sweep.reason
        data = sweep.data[layer]
        config = ProbeConfig(data.hidden_size, hidden=REPORTED_PROBE_WIDTH)
        probe, _ = train_probe(data.x, data.y, config, TrainConfig())
        origin = (f"{REPORTED_PROBE_WIDTH}-neuron probe trained here on the run's labels (paper recipe, seed 42) "
                  f"at layer {layer}, the layer sweep's held-out choice: {reason}")
        threshold = float(DEFAULT_THRESHOLD)
    return ProbeBundle(data, probe, threshold, origin, evaluate_probe(probe, data, threshold))


def probe_sweep(a: Any) -> ProbeSweep:
    """The layer sweep over the whole depth (64-neuron probes, held-out scores per layer) and the layer its held-out
    result selects (sec:halting_probe_method: the layer is chosen out of sample); computed once per analysis."""
    from sst_interp.probe.dataset import load_probe_data_layers
    from sst_interp.probe.model import DEFAULT_THRESHOLD, ProbeConfig
    from sst_interp.probe.sweeps import layer_sweep, select_heldout_layer, sweep_layers
    from sst_interp.probe.train import TrainConfig

    def build() -> ProbeSweep:
        from sst_interp.analyses.loop_manifest import layers_at_every_iteration

        run = a.run
        # a family's layers outside its loop hold iteration 1 only: the labels need a state at every depth
        looped = layers_at_every_iteration(run.manifest)
        layers = sweep_layers(run.num_layers) if looped is None else [looped[i] for i in sweep_layers(len(looped))]
        data = load_probe_data_layers(run, layers)
        result = layer_sweep(data, ProbeConfig(run.hidden_size, hidden=MECHANISTIC_PROBE_WIDTH), TrainConfig(),
                             threshold=DEFAULT_THRESHOLD)
        layer, reason = select_heldout_layer(result)
        return ProbeSweep(result, int(layer), reason, data, layers)

    return a.memo("probe:sweep", build)


def mechanistic_probe(a: Any) -> Any:
    """The 64-neuron probe of the neuron analysis: the given probe when it has 64 units, else one trained here."""
    from sst_interp.probe.model import ProbeConfig
    from sst_interp.probe.train import TrainConfig, train_probe

    bundle = probe_bundle(a)
    if isinstance(bundle, NotApplicable):
        return bundle
    if bundle.probe.n_hidden == MECHANISTIC_PROBE_WIDTH:
        return bundle.probe

    def build() -> Any:
        bundle.data.labels.require_must_halt()
        config = ProbeConfig(bundle.data.hidden_size, hidden=MECHANISTIC_PROBE_WIDTH)
        return train_probe(bundle.data.x, bundle.data.y, config, TrainConfig())[0]

    return a.memo("probe:64", build)


def feature_search(a: Any) -> tuple[Any, Any]:
    """(top-K sweep, greedy prune or NotApplicable) of the reported probe; computed once per analysis (slow)."""
    from sst_interp.probe.features import greedy_prune, topk_sweep

    bundle = probe_bundle(a)

    def build() -> tuple[Any, Any]:
        sweep = topk_sweep(bundle.probe, bundle.data, None, bundle.threshold)
        if sweep.minimal_k is None:
            return sweep, NotApplicable("no top-K input set reproduces the unablated probe's result",
                                        "tab:halting_probe_greedy_prune")
        return sweep, greedy_prune(bundle.probe, bundle.data, sweep.minimal_k, bundle.threshold)

    return a.memo("probe:features", build)


# ------------------------------------------------------------------------------------------------ computations
def _with_bundle(build: Callable[[Any, ProbeBundle], Any]) -> Callable[[Any], Any]:
    def compute(a: Any) -> Any:
        bundle = probe_bundle(a)
        if isinstance(bundle, NotApplicable):
            return bundle
        return build(a, bundle)

    compute.__doc__ = build.__doc__
    return compute


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
    notes = [_origin(b), "each fold retrains the same architecture from scratch without one MUST HALT question",
             f"p_permutation = {result.p_permutation:.3g}: the same LOOCV rerun on {result.n_permutations} label "
             f"permutations within equal-correct-depth strata (every fold retrained); held-out accuracy under the "
             f"null {result.null_accuracy:.1%} vs observed {result.accuracy:.1%}. This is the significance to read.",
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


# ------------------------------------------------------------------------------------------------ found
def halt_labels(a: Any) -> Any:
    """The run's MUST HALT / SAFE labels (:class:`~sst_interp.probe.labels.HaltLabels`, from the generations table
    only), or the UsageError's reason when the run cannot be labelled; computed once per analysis."""
    from sst_interp.probe.labels import labels_from_generations

    def build() -> Any:
        try:
            return labels_from_generations(a.run.generations())
        except UsageError as err:
            return " ".join(str(err).split())

    return a.memo("probe:labels", build)


#: How to get the in-sample tables on a run with too few MUST HALT questions to train a probe on.
PROBE_FIX = "pass probe=PATH, a probe trained with `python -m sst_interp.probe train` (the report: --probe PATH)"


def _labels_found(in_sample: bool) -> Callable[[Any], str | None]:
    """The check ``available()`` runs before promising a probe table: labels the probe can be trained (or, for the
    in-sample tables with ``probe=``, evaluated) on. Training here selects the layer by question-fold cross-fitting,
    which needs at least 2 MUST HALT questions and a SAFE timestep."""
    def check(a: Any) -> str | None:
        labels = halt_labels(a)
        if isinstance(labels, str):
            return labels
        if in_sample and a.probe is not None:
            bundle = probe_bundle(a)  # a given probe is loaded and evaluated, never trained: cheap
            return bundle.reason if isinstance(bundle, NotApplicable) else None
        n = len(labels.must_halt_questions)
        if n >= 2 and labels.n_safe > 0:
            return None
        fix = (PROBE_FIX + ", or record more questions" if in_sample else
               "record more questions (this table trains on the run's own labels, so probe= does not replace them)")
        return (f"the run has {n} MUST HALT question{'' if n == 1 else 's'} and {labels.n_safe} SAFE timesteps; "
                f"training the probe here needs at least 2 MUST HALT questions and a SAFE timestep (its layer is "
                f"chosen by cross-fitting over them): {fix}")

    return check


def _prune_found(a: Any) -> str | None:
    # the greedy prune and its grid exist only when the top-K search finds a set (it runs once, memoised)
    reason = _labels_found(False)(a)
    if reason is not None:
        return reason
    _, prune = feature_search(a)
    if isinstance(prune, NotApplicable):
        return prune.reason
    return "no essential dimension: the probe does not read the hidden state" if prune.essential.size == 0 else None


# ------------------------------------------------------------------------------------------------ tidy
def _notes(a: Any, result: ProbeTable) -> list[str]:
    return list(result.notes)


def _extra(result: ProbeTable) -> dict[str, pd.DataFrame]:
    return dict(result.extra)


def _renamed(renames: dict[str, str]) -> Callable[[Any], pd.DataFrame]:
    return lambda result: tidy.renamed(result.table(), renames)


def _per_iter_tidy(result: ProbeTable) -> pd.DataFrame:
    # one row per iteration depth; the paper's Total row is their sum, so it is left out
    frame = result.table()
    frame = frame[frame["depth"].astype(str) != "Total"].copy()
    frame["depth"] = frame["depth"].astype(str).str.removeprefix("iter = ").astype("int64")
    return tidy.renamed(frame, {})


def _halting_tidy(result: ProbeTable) -> pd.DataFrame:
    frame = result.table()
    return tidy.categories(frame, "method", {c: c.replace("accuracy", "accuracy_fraction") for c in frame.columns
                                             if c != "method"}).rename(columns={"category": "method_key",
                                                                                "category_text": "method"})


def _outcome_doc(kind: str) -> dict[str, str]:
    """The columns of a halting simulation's outcome row (``kind``: "in-sample " or "")."""
    return {"correct": f"{kind}questions answered right", "n_questions": "questions",
            "accuracy_fraction": "correct / n_questions", "delta_pp_vs_iter1": "accuracy minus iter=1's, percentage "
            "points", "overthinks": "questions continued past a passing depth", "missed": "questions halted too "
            "early", "halt_detected": "MUST HALT timesteps the probe halts at", "must_halt_total": "MUST HALT "
            "timesteps", "safe_left_alone": "SAFE timesteps the probe continues at", "safe_total": "SAFE timesteps"}

MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(name="halting_probe", label="tab:halting_probe", title="Halting by the probe (in sample): accuracy "
                "against iter=1 and the staged capacity, overthinks and misses.", requires=("probe",),
                compute=_with_bundle(halting_probe), tidy=_halting_tidy,
                columns={"method_key": "snake_case key of the row", "method": "the row's text (iter=1, the probe, "
                         "staged capacity)", "correct": "questions answered right", "accuracy_fraction": "fraction "
                         "right", "delta_pp_vs_iter1": "accuracy minus iter=1's, percentage points",
                         "overthinks": "questions continued past a passing depth", "missed": "questions halted too "
                         "early"}, notes=_notes, extra_tables=_extra, found=_labels_found(True),
                family=sections.HALTING_PROBE, inputs=("run", "probe"), caption="Halting by the probe, in sample (the "
                "probe is scored on the questions it was trained on): accuracy against iter=1 and the staged capacity, "
                "overthinks (continued past a passing depth) and misses (halted too early). Not evidence of "
                "generalisation: see the LOOCV permutation test."),
    Measurement(name="halting_probe_per_iter", label="tab:halting_probe_per_iter", title="MUST HALT detection and SAFE "
                "timesteps left alone per iteration depth (in sample).", requires=("probe",),
                compute=_with_bundle(per_iter), tidy=_per_iter_tidy,
                columns={"depth": "the iteration depth of the timestep", "must_halt_total": "MUST HALT timesteps",
                         "must_halt_detected": "of them the probe halts at", "safe_total": "SAFE timesteps",
                         "safe_left_alone": "of them the probe continues at", "must_halt_rate": "detected fraction",
                         "safe_rate": "left-alone fraction"}, notes=_notes, extra_tables=_extra,
                found=_labels_found(True), family=sections.HALTING_PROBE, inputs=("run", "probe"), caption="MUST HALT "
                "detection and SAFE timesteps left alone, per iteration depth, in sample (not evidence of "
                "generalisation)."),
    Measurement(name="halt_signal", label="fig:halt_signal", title="The probe's logit at every labelled timestep (in "
                "sample).", requires=("probe",), compute=_with_bundle(halt_signal),
                tidy=lambda r: tidy.renamed(r.table(), {}),
                columns={"question_id": "question", "turn": "model turn", "depth": "iteration depth of the timestep",
                         "must_halt": "the timestep's label is MUST HALT (else SAFE)", "correct_depth": "the "
                         "question's first correct depth", "logit": "the probe's output logit",
                         "above_threshold": "logit above the halting threshold", "question_kind": "the question's "
                         "label pattern", "marker": "how the figure draws the timestep"}, kind="figure",
                found=_labels_found(True), family=sections.HALTING_PROBE, figure="halt_signal", inputs=("run", "probe"),
                caption="In-sample probe logit at every labelled timestep (the probe was trained on these timesteps, "
                "so the separation shown is not evidence of a feature; see the LOOCV permutation test): histogram by "
                "class, per-question strip, and each timestep at its depth with detected halts, harmless false halts "
                "and missed continues."),
    Measurement(name="halting_probe_loocv", label="", title="Leave-one-MUST-HALT-question-out cross-validation with "
                "the calibrated permutation p and the paper's binomial p (app:halting_loocv).", requires=("probe",),
                compute=_with_bundle(loocv_table), tidy=_renamed({"accuracy": "accuracy_fraction"}),
                columns={"loocv_correct": "held-out MUST HALT questions halted right", "folds": "folds (MUST HALT "
                         "questions)", "accuracy_fraction": "loocv_correct / folds", "base_rate": "the in-sample halt "
                         "rate (binomial null)", "p_value": "the paper's binomial p", "p_binomial": "the same",
                         "p_permutation": "label-permutation p (calibrated; read this)", "permutations": "permutations "
                         "run", "null_accuracy": "held-out accuracy under the null", "ci_low": "95% CI of the "
                         "accuracy, low", "ci_high": "its high bound", "criterion": "what counts as a correct fold",
                         "p_value_depth_matched": "binomial p against the depth-matched base rate"}, notes=_notes,
                extra_tables=_extra, found=_labels_found(False), family=sections.HALTING_PROBE, inputs=("run", "probe"),
                caption="Leave-one-MUST-HALT-question-out cross-validation: held-out questions correctly halted, with "
                "the calibrated label-permutation p (every fold retrained per permutation; read significance here) and "
                "the paper's binomial p against the in-sample base rate (reproduces the paper, not calibrated)."),
    Measurement(name="halting_probe_layer_sweep", label="tab:halting_probe_layer_sweep", title="A 64-neuron probe per "
                "layer, ranked by held-out (question-fold cross-fitted) scores.", requires=("probe",),
                compute=_with_bundle(layer_sweep), tidy=_renamed({"accuracy": "accuracy_fraction"}),
                columns={"layer": "decoder layer", **_outcome_doc("in-sample "), "heldout_correct": "held-out "
                         "(question-fold cross-fitted) questions right", "heldout_overthinks": "held-out overthinks",
                         "heldout_missed": "held-out misses", "heldout_auc": "held-out ROC AUC of MUST HALT vs SAFE",
                         "heldout_halt_rate_must_halt": "held-out halt rate at MUST HALT timesteps",
                         "heldout_halt_rate_safe": "held-out halt rate at SAFE timesteps", "loocv_correct": "LOOCV "
                         "folds right (where run)", "loocv_folds": "LOOCV folds", "loocv_accuracy": "loocv_correct / "
                         "loocv_folds", "loocv_base_rate": "binomial null rate", "loocv_p": "binomial p",
                         "loocv_p_permutation": "permutation p", "loocv_permutations": "permutations run",
                         "loocv_p_depth_matched": "binomial p against the depth-matched base rate"}, notes=_notes,
                extra_tables=_extra, found=_labels_found(False), family=sections.HALTING_PROBE, inputs=("run", "probe"),
                caption="A 64-neuron probe trained at every layer (an even grid of 16 above 32 layers): in-sample "
                "evaluation and held-out (question-fold cross-fitted) scores; the layer is chosen by the held-out "
                "result, named in the notes."),
    Measurement(name="halting_probe_ablation_sweep", label="tab:halting_probe_ablation_sweep", title="Halting with "
                "only the top neurons of the 64-neuron probe kept.", requires=("probe",),
                compute=_with_bundle(ablation_sweep), tidy=_renamed({"accuracy": "accuracy_fraction"}),
                columns={"configuration": "which neurons are kept", "kept": "neurons kept", **_outcome_doc("")},
                notes=_notes, extra_tables=_extra, found=_labels_found(False), family=sections.HALTING_PROBE,
                inputs=("run", "probe"), caption="Neuron ablations of the 64-neuron probe: keep the top-N neurons by "
                "logit contribution, remove the top neuron, or keep only it."),
    Measurement(name="halting_probe_topk_sweep", label="tab:halting_probe_topk_sweep", title="Halting with only the "
                "top-K input dimensions by weight importance.", requires=("probe",), compute=_with_bundle(topk),
                tidy=_renamed({"accuracy": "accuracy_fraction"}),
                columns={"K": "input dimensions kept", "grid": "K on the sweep's grid", "baseline_match": "reproduces "
                         "the unablated probe", **_outcome_doc(""), "minimal": "the smallest K that reproduces it"},
                notes=_notes, extra_tables=_extra, found=_labels_found(False), family=sections.HALTING_PROBE,
                inputs=("run", "probe"), caption="Inference-only input ablation: keep the top-K hidden dimensions by "
                "weight importance, zero the rest."),
    Measurement(name="halting_probe_greedy_prune", label="tab:halting_probe_greedy_prune", title="Greedy pruning of "
                "the minimal top-K set to the essential dimensions.", requires=("probe",), compute=_with_bundle(greedy),
                tidy=lambda r: tidy.categories(r.table(), "item", {"count": "count"}),
                columns={"category": "snake_case key of the row", "category_text": "the row's text",
                         "count": "dimensions"}, notes=_notes, extra_tables=_extra, found=_prune_found,
                family=sections.HALTING_PROBE, inputs=("run", "probe"), caption="Greedy pruning of the top-K set to "
                "the essential dimensions the probe cannot lose."),
    Measurement(name="feature_position_grid", label="fig:feature_position_grid", title="The essential dimensions on a "
                "grid of the hidden state.", requires=("probe",), compute=_with_bundle(feature_grid),
                tidy=lambda r: tidy.renamed(r.table(), {}),
                columns={"dim": "hidden-state dimension", "row": "grid row", "col": "grid column", "importance": "the "
                         "dimension's weight importance"}, kind="figure", found=_prune_found,
                family=sections.HALTING_PROBE, figure="feature_grid", inputs=("run", "probe"), caption="The essential "
                "hidden-state dimensions on a grid of the position-0 state (dim 0 at the bottom left), coloured by "
                "weight importance."),
)
