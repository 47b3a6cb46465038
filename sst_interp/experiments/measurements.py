"""The intervention experiments' tables and figure as catalogue entries (scope ``experiment``).

An experiment folder (``python -m sst_interp.intervene {window,trace,steer,attribute} --out DIR``) is measured like a run:
``e = study.open_experiment(DIR)``, then ``e.data("tab_intervention_window")``, ``e.notes(...)``,
``e.available()``. The report's Interventions artefacts stack these entries over the ``--experiment`` folders.
This package sits above :mod:`sst_interp.analyses`, so its entries and their requirements are declared here
(:data:`MEASUREMENTS`, :data:`REQUIREMENTS`), and :mod:`sst_interp.catalogue` gathers them with every other family's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from sst_interp.analyses import tidy
from sst_interp.analyses.figure_data import FigureData
from sst_interp.analyses.measurement import Measurement
from sst_interp.experiments.manifest import KINDS, kinds_in, read_manifest, read_table
from sst_interp.experiments.tables import (
    ATTRIBUTION_VERIFIED,
    ATTRIBUTION_VERIFIED_COLUMNS,
    FLIP_POWER_COLUMN,
    PATCHED_OWN,
    PATCHED_RESAMPLED,
    POWER_COLUMN,
    STEER_COLUMNS,
    TRACE_LAYER_ITERATION,
    TRACE_LAYER_OFFSET,
    TRACE_LAYER_OFFSET_RESAMPLED,
    WINDOW_COLUMNS,
)
from sst_interp.experiments.trace_cells import ALIGNED_COLUMNS
from sst_interp.kernels.results import AnalysisResult


@dataclass(frozen=True)
class ExperimentTable(AnalysisResult):
    """One table an experiment wrote (checked against the sha256 its manifest records), with provenance notes.

    Args:
        frame: the table as written (tidy: one row per condition or heatmap cell).
        notes: what the experiment ran (its config, question set, condition runs) and how its statistics are made.
    """

    frame: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    def table(self) -> pd.DataFrame:
        """The table."""
        return self.frame


def _provenance(folder: Path, kind: str) -> str:
    manifest = read_manifest(folder, kind)
    record = manifest["record"]
    return (f"{Path(folder).name}: {kind} {manifest['config']}; {record['questions']} ({record['protocol']}), batch "
            f"{record['batch_size']}, {len(manifest['conditions'])} condition run(s) under {Path(folder).name}/runs")


def _holds(kind: str) -> Callable[[Any], str | None]:
    def check(e: Any) -> str | None:
        if kind not in kinds_in(e.folder):
            return (f"{e.folder} holds no {kind} experiment (python -m sst_interp.intervene {kind} --out DIR, then "
                    f"report --experiment DIR)")
        return None

    return check


#: One declarative requirement per experiment kind: the folder holds that experiment.
REQUIREMENTS = {f"{kind}_experiment": _holds(kind) for kind in KINDS}


def _table(kind: str, table: str, note: str) -> Callable[[Any], ExperimentTable]:
    def compute(e: Any) -> ExperimentTable:
        return ExperimentTable(read_table(e.folder, kind, table), [_provenance(e.folder, kind), note])

    return compute


def _aligned(folder: Path) -> pd.DataFrame:
    """The trace's layer x offset cells (:mod:`sst_interp.experiments.trace_cells`) with a ``patched`` column: the
    question's own depth-k states, and, where the experiment ran its control, another question's (resampled)."""
    parts = [read_table(folder, "trace", TRACE_LAYER_OFFSET).assign(patched=PATCHED_OWN)]
    if TRACE_LAYER_OFFSET_RESAMPLED in read_manifest(folder, "trace")["tables"]:
        parts.append(read_table(folder, "trace", TRACE_LAYER_OFFSET_RESAMPLED).assign(patched=PATCHED_RESAMPLED))
    table = pd.concat(parts, ignore_index=True)
    return table[["patched", *ALIGNED_COLUMNS]]


def _trace_aligned(e: Any) -> ExperimentTable:
    return ExperimentTable(_aligned(e.folder), [
        _provenance(e.folder, "trace"),
        "offset = patched position - the question's target position (0: the target; -1: the token before it); "
        "indirect effect = patched - depth-1 log-prob of the target token, tokens before the target forced to the "
        "shared ones; total effect = depth k - depth 1 of the same questions; sign test exact, Holm over each map's "
        "cells; the resampled rows patch another question's depth-k state at the same site (the control: an "
        "effect that is the question's own computation does not come back from another question's state)"])


def _trace_figure(e: Any) -> FigureData:
    return FigureData({"layer_offset": _aligned(e.folder),
                       "layer_iteration": read_table(e.folder, "trace", TRACE_LAYER_ITERATION)},
                      {"notes": [_provenance(e.folder, "trace")]}, main="layer_offset")


def _notes(e: Any, result: ExperimentTable) -> list[str]:
    return list(result.notes)


def _as_is(result: Any) -> pd.DataFrame:
    return tidy.renamed(result.table(), {})


SHARED_DOC = {
    "depth": "the depth the condition was recorded at", "n_questions": "questions",
    "accuracy_pct": "accuracy", "broken": "questions right in the clean depth-k run, wrong here",
    "fixed": "questions wrong in the clean depth-k run, right here", "mcnemar_exact_p": "exact McNemar p of the flips",
    "logprob_change_mean": "mean change of the clean depth-k token's log-prob (nats; NaN when a question is "
                           "censored: see the bounds); a number only, no interval: none of a mean holds its level "
                           "on skewed or zero-inflated effects at these n (see the median)",
    "logprob_change_bound_low": "the mean with censored questions at their floor (nats)",
    "logprob_change_bound_high": "the mean with censored questions at the most they can have (nats)",
    "logprob_change_median": "median change of the clean depth-k token's log-prob over questions (nats; NaN when "
                             "censored questions leave it unsettled)",
    "logprob_change_median_ci_low": "its 95% exact sign-test interval, low: an order statistic of the low bounds "
                                    "(nats; coverage >= 95% at every distribution, ties included; NaN below 6 "
                                    "questions, where even [min, max] covers under 95%)",
    "logprob_change_median_ci_high": "the sign-test interval's high limit: an order statistic of the high bounds "
                                     "(nats)",
    "flip_rate_pct": "questions whose correctness changed (broken + fixed), percent of n_questions",
    "flip_rate_ci_low": "its 95% Clopper-Pearson exact interval, low (percent; NaN below n = 2); with no flip in n "
                        "questions the interval is [0, 1 - 0.025^(1/n)]",
    "flip_rate_ci_high": "the Clopper-Pearson high limit (percent)",
    "logprob_sign_p": "exact two-sided sign test of the change (NaN below 6 questions of known sign)",
    "logprob_sign_n": "questions the sign test counted (sign known, non-zero)",
    "logprob_sign_up": "of those, the questions whose log-prob went up",
    "logprob_sign_p_holm": "the sign test's p adjusted over the sweep's conditions",
    "correction": "the multiple-comparison correction and how many cells it spans",
    "logprob_compared": "questions with the token in both top-Ks",
    "logprob_censored": "questions where it left the recorded top-K (kept as bounds)",
    FLIP_POWER_COLUMN: "questions McNemar's exact test would need to find this cell's observed flips (fixed against "
                       "broken) with 80% power at 0.05 / cells (NaN when they are equal)",
    POWER_COLUMN: "questions the sign test would need to find this cell's observed effect with 80% power at "
                  "0.05 / cells (exact binomial power; NaN when up equals down)",
}
WINDOW_DOC = {"condition": "clean depth 1, clean depth k, or the window",
              "mode": "how the window denies the stream: freeze, zero, or the controls mean (the clean run's mean "
                      "state) and resample (another question's state); clean for the reference rows",
              "first_layer": "the window's first layer",
              "last_layer": "its last layer", "accuracy_change_pp": "accuracy minus clean depth k's, points",
              "accuracy_change_ci_low": "its 95% exact interval, low (points; NaN below n = 2): the accuracy change "
                                        "is q (2 pi - 1), q the flip rate and pi the share of flips that are fixes, "
                                        "bounded over their Clopper-Pearson intervals at 97.5% each (coverage >= "
                                        "95% at every n; never a point when nothing flipped)",
              "accuracy_change_ci_high": "the exact interval's high limit (points)", **SHARED_DOC}
STEER_DOC = {"direction": "probe (the probe's direction), random N (the control of seed N, the same norm), or clean",
             "random_logprob_change_min": "probe rows: the smallest high-bound mean log-prob change of the random "
                                          "directions at this scale (nats)",
             "random_logprob_change_max": "probe rows: the largest (nats); the probe's effect is the probe's, not any "
                                          "push of that size, only outside [min, max]",
             "condition": "clean depth 1, clean depth k, or the steering scale", "scale": "the scale (units of the "
             "state's mean norm at the probe's layer)", "regressions": "right at clean depth 1, wrong here",
             "recoveries": "wrong at clean depth 1, right here", "regressions_change": "regressions minus clean "
             "depth k's", "recoveries_change": "recoveries minus clean depth k's", **SHARED_DOC}
TRACE_DOC = {"layer": "decoder layer patched", "position": "generated position patched",
             "indirect_effect_mean": "mean indirect effect on the target token's log-prob (nats)",
             "n_questions": "questions in the cell", "indirect_effect_sem": "its standard error (nats)"}
TRACE_ALIGNED_DOC = {"patched": f"whose depth-k state is patched in: {PATCHED_OWN!r}, or {PATCHED_RESAMPLED!r} "
                                "(another question's, drawn with seed 0: the control)",
                     "layer": TRACE_DOC["layer"],
                     "offset": "patched position minus the question's target position (0: the target itself)",
                     "n_questions": "questions with a position at that offset",
                     "indirect_effect_mean": TRACE_DOC["indirect_effect_mean"],
                     "indirect_effect_sem": TRACE_DOC["indirect_effect_sem"],
                     "total_effect_mean": "mean total effect (depth k - depth 1 log-prob of the target) of the cell's "
                                          "questions (nats)",
                     "total_effect_sem": "its standard error (nats)",
                     "sign_p": "exact two-sided sign test of the indirect effects (NaN below 6 questions)",
                     "sign_n": "questions the sign test counted",
                     "sign_p_holm": "the sign test's p Holm-adjusted over the map's cells",
                     "correction": "the multiple-comparison correction and how many cells it spans"}
ATTRIBUTION_DOC = {"layer": "decoder layer patched", "position": "generated position patched",
                   "source_iteration": "depth k's iteration whose state is patched into depth 1's iteration 1",
                   "n_questions": "questions whose target is at or after the position",
                   "estimate_mean": "mean first-order estimate of the effect on the target's log-prob (nats)",
                   "real_mean": "mean effect of the real patch (nats)",
                   "real_patching_s": "seconds of the real patching generations of the cell"}

MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(name="intervention_window", label="", title="Where the depth gain lives: iterations 2..k denied the "
                "state stream in windows of layers (experiment a).", requires=("window_experiment",),
                compute=_table("window", "window", "CIs over questions, 95%: accuracy change exact (Clopper-Pearson "
                               "flip rate x share of fixes) and flip rate Clopper-Pearson, none below n = 2; median "
                               "log-prob change exact sign-test interval, none below n = 6; the mean log-prob change "
                               "has no interval (coverage: bench/results/interval_coverage.log); McNemar: exact, "
                               "window vs clean depth k"), tidy=_as_is,
                columns={c: WINDOW_DOC[c] for c in WINDOW_COLUMNS}, notes=_notes, scope="experiment"),
    Measurement(name="intervention_trace", label="", title="Causal tracing across depths, aligned to each question's "
                "target: indirect effect per (layer, offset) with n, SE and the total effect, beside the resampled "
                "control (experiment b).", requires=("trace_experiment",), compute=_trace_aligned, tidy=_as_is,
                columns=TRACE_ALIGNED_DOC, notes=_notes, scope="experiment"),
    Measurement(name="intervention_trace_heatmap", label="", title="Causal tracing heatmaps: layer x offset from the "
                "target (own states, and the resampled control) and layer x iteration (experiment b).",
                requires=("trace_experiment",), compute=_trace_figure, tidy=_as_is, columns=TRACE_ALIGNED_DOC,
                kind="figure", scope="experiment"),
    Measurement(name="intervention_steer", label="", title="Steering the halt along the probe's direction (experiment "
                "c).", requires=("steer_experiment",),
                compute=_table("steer", "steer", "scale in units of the state's mean norm at the probe's layer "
                               "(position 0, clean depth k); CIs over questions, 95%: median log-prob change exact "
                               "sign-test interval (none below n = 6; the mean has none), flip rate Clopper-Pearson "
                               "(none below n = 2); sign test (none below 6) p Holm-adjusted over the scales"),
                tidy=_as_is, columns={c: STEER_DOC[c] for c in STEER_COLUMNS}, notes=_notes, scope="experiment"),
    Measurement(name="intervention_attribution", label="", title="Attribution patching: the cells with the largest "
                "first-order estimate, each beside its real patching effect (trace's patch, one gradient per batch).",
                requires=("attribute_experiment",),
                compute=_table("attribute", ATTRIBUTION_VERIFIED, "estimate = gradient of the target's log-prob at "
                               "depth 1's layer output . (depth k's state - depth 1's), tokens before the target "
                               "forced; real = the same patch run"), tidy=_as_is,
                columns={c: ATTRIBUTION_DOC[c] for c in ATTRIBUTION_VERIFIED_COLUMNS}, notes=_notes,
                scope="experiment"),
)
