"""The halting probe's measurements (sec:halting_probe, app:halting) as catalogue entries.

The probe sits above :mod:`sst_interp.analyses`, so its tables and figures are declared here (:data:`MEASUREMENTS`),
and :mod:`sst_interp.catalogue` gathers them with every other family's.
Everything else works as for any measurement: ``a = study.open(run, probe=PATH)``, then ``a.data("tab:halting_probe")``,
``a.table(...)``, ``a.notes(...)``, ``a.available()``, and the report's probe artefacts are adapters over the same
entries.

The probe is ``probe=`` when given, else a 10-neuron probe trained on the run's MUST HALT labels (paper recipe) at the
layer the held-out layer sweep chooses; the neuron analysis reads a 64-neuron probe, as the paper's does. Those shared
steps are computed once per :class:`~sst_interp.study.RunAnalysis` (:mod:`sst_interp.probe.steps`), and each entry's
table or figure from them (:mod:`sst_interp.probe.tables`); this module holds the entries, the checks ``available()``
runs before promising one, and their tidy forms.

Evidence rule: in-sample separation (a probe scored on the timesteps it was trained on) is never evidence of a
halting feature; the in-sample tables and fig:halt_signal say so. Generalisation is read from the LOOCV permutation
p-value and the layer sweep ranks layers by held-out (question-fold cross-fitted) scores.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from sst_interp.analyses import sections, tidy
from sst_interp.analyses.measurement import Measurement
from sst_interp.kernels.results import NotApplicable
from sst_interp.probe.steps import ProbeBundle, feature_search, halt_labels, probe_bundle
from sst_interp.probe.tables import (
    ProbeTable,
    ablation_sweep,
    feature_grid,
    greedy,
    halt_signal,
    halting_probe,
    layer_sweep,
    loocv_table,
    per_iter,
    topk,
)


def _with_bundle(build: Callable[[Any, ProbeBundle], Any]) -> Callable[[Any], Any]:
    def compute(a: Any) -> Any:
        bundle = probe_bundle(a)
        if isinstance(bundle, NotApplicable):
            return bundle
        return build(a, bundle)

    compute.__doc__ = build.__doc__
    return compute


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
                         "p_permutation": "label-permutation p (calibrated; read this): sequential, stopped once the "
                         "answer at 0.05 was settled; 1 when the strata allow too few labellings to reach 0.05",
                         "permutations": "label permutations drawn (each retrains every fold)", "permutation_stop":
                         "why the permutations stopped, or why none was drawn", "label_arrangements": "labellings the "
                         "permutation strata allow (the smallest exact permutation p is their inverse)",
                         "null_accuracy": "held-out accuracy under the null", "ci_low": "95% CI of the "
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
                         "loocv_p_permutation": "permutation p", "loocv_permutations": "permutations drawn",
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
