"""Logit dynamics (sec:logit_dynamics, app:logit_methodology, app:logit_tables).

Typical use::

    from sst_interp.analyses import logit_dynamics as ld
    recs = ld.collect_records(run, labels)          # streams the run one question at a time
    ld.argmax_concentration(recs).table()           # tab:argmax_concentration
    ld.decision_boundary(recs).table()              # tab:decision_boundary
    ld.gap_distributions(recs).table()              # tab:gap_distributions
    ld.reorg_argmax(recs, "low_overlap").table()    # tab:reorg_lo_argmax ("stable": tab:reorg_st_argmax)
    ld.reorg_all(recs, "stable").table()            # tab:reorg_st_all ("low_overlap": tab:reorg_lo_all)
    ld.basin_shift_activity(labels).table()         # tab:basin_shift_activity
    ld.later_iter_computation(recs).table()         # tab:later_iter_computation

``labels`` is a regime label table (see :mod:`.regimes`): which positions are low-overlap for each
compared pair of iterations; the basins module produces it.
"""

from collections.abc import Callable
from typing import Any

from sst_interp.analyses import sections, tidy
from sst_interp.analyses.measurement import QUANTITY_DOC, Measurement, grouped, quantities
from sst_interp.analyses.logit_dynamics.later import (
    BasinShiftActivity,
    LaterIterComputation,
    basin_shift_activity,
    later_iter_computation,
)
from sst_interp.analyses.logit_dynamics.records import (
    LogitRecords,
    collect_records,
    compare_distributions,
    cross_run_records,
    question_records,
    records_from_blocks,
    trajectory_records,
    window_divergence,
    within_run_records,
)
from sst_interp.analyses.logit_dynamics.regimes import (
    LABEL_COLUMNS,
    PAPER_THRESHOLD,
    attach_labels,
    check_labels,
    labels_from_overlap,
    labels_from_run,
    needed_pairs,
)
from sst_interp.analyses.logit_dynamics.tables import (
    LOW,
    STABLE,
    ArgmaxConcentration,
    DecisionBoundary,
    GapDistributions,
    LogitTable,
    ReorgLowAll,
    ReorgLowArgmax,
    ReorgStableAll,
    ReorgStableArgmax,
    argmax_concentration,
    decision_boundary,
    gap_distributions,
    reorg_all,
    reorg_argmax,
)

__all__ = [
    "LABEL_COLUMNS", "LOW", "PAPER_THRESHOLD", "STABLE", "ArgmaxConcentration", "BasinShiftActivity",
    "DecisionBoundary", "GapDistributions", "LaterIterComputation", "LogitRecords", "LogitTable", "ReorgLowAll",
    "ReorgLowArgmax", "ReorgStableAll", "ReorgStableArgmax", "argmax_concentration", "attach_labels",
    "basin_shift_activity", "check_labels", "collect_records", "compare_distributions", "cross_run_records",
    "decision_boundary", "gap_distributions", "labels_from_overlap", "labels_from_run", "needed_pairs", "later_iter_computation",
    "question_records", "records_from_blocks", "reorg_all", "reorg_argmax", "trajectory_records",
    "window_divergence", "within_run_records",
]


# ------------------------------------------------------------------------------------------------ entries
# sec:logit_dynamics, app:logit_tables.
REGIME = ("low_overlap", "stable")
WITHIN_CROSS = ("within", "cross")


def _records(build: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda a: build(a.logit_records())


def _threshold_note(a: Any, result: Any) -> list[str]:
    threshold, origin = a.threshold
    return [f"regimes at overlap threshold {threshold:.4f} ({origin})"]


def _records_note(a: Any, result: Any) -> list[str]:
    threshold, origin = a.threshold
    records = a.logit_records()
    return [f"regimes at overlap threshold {threshold:.4f} ({origin}); window {records.max_positions} positions, "
            f"top-{records.top_n} comparisons"]


def _reorg(kind: str, regime: str) -> Callable[[Any], Any]:
    reorg = {"argmax": reorg_argmax, "all": reorg_all}[kind]
    return lambda a: reorg(a.logit_records(), LOW if regime == "low" else STABLE)


MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(name="argmax_concentration", label="tab:argmax_concentration", title="Argmax change rates at "
                "low-overlap vs stable positions.", requires=("iterations",), compute=_records(argmax_concentration),
                tidy=quantities("quantity", (*REGIME, "total"), "regime"),
                columns=grouped("regime", "low_overlap, stable or total"), notes=_records_note,
                family=sections.LOGIT_DYNAMICS, caption="Argmax change rates at low-overlap vs stable positions "
                "(cross-run, all depth pairs, pre-divergence), with the odds ratio."),
    Measurement(name="decision_boundary", label="tab:decision_boundary", title="Exact ties vs strict overrides among "
                "argmax changes.", requires=("iterations",), compute=_records(decision_boundary),
                tidy=quantities("quantity"), columns=QUANTITY_DOC, notes=_records_note, family=sections.LOGIT_DYNAMICS,
                caption="Exact ties vs strict overrides among argmax changes, and the top-1 log-prob shift at changes "
                "vs non-changes (cross-run)."),
    Measurement(name="gap_distributions", label="tab:gap_distributions", title="Top-1 minus top-2 gap at argmax "
                "changes by regime.", requires=("iterations",), compute=_records(gap_distributions),
                tidy=quantities("quantity", REGIME, "regime"), columns=grouped("regime", "low_overlap or stable"),
                notes=_records_note, family=sections.LOGIT_DYNAMICS, caption="Top-1 minus top-2 gap at argmax-changing "
                "positions by regime (within-run, iter 1 vs later iterations)."),
    Measurement(name="reorg_lo_argmax", label="tab:reorg_lo_argmax", title="Posterior reorganisation at low-overlap "
                "argmax changes.", requires=("iterations",), compute=_reorg("argmax", "low"),
                tidy=quantities("quantity", WITHIN_CROSS, "comparison"),
                columns=grouped("comparison", "within or cross run"), notes=_records_note,
                family=sections.LOGIT_DYNAMICS, caption="Posterior reorganisation at low-overlap argmax changes: top-n "
                "replacement, top-5 rank shifts, argmax suppression, rank of the new winner (within- and cross-run)."),
    Measurement(name="reorg_st_argmax", label="tab:reorg_st_argmax", title="Posterior reorganisation at stable argmax "
                "changes.", requires=("iterations",), compute=_reorg("argmax", "stable"),
                tidy=quantities("quantity", WITHIN_CROSS, "comparison"),
                columns=grouped("comparison", "within or cross run"), notes=_records_note,
                family=sections.LOGIT_DYNAMICS, caption="Posterior reorganisation at stable argmax changes (within- "
                "and cross-run)."),
    Measurement(name="reorg_lo_all", label="tab:reorg_lo_all", title="Top-n replacement at every low-overlap position.",
                requires=("iterations",), compute=_reorg("all", "low"),
                tidy=quantities("quantity", WITHIN_CROSS, "comparison"),
                columns=grouped("comparison", "within or cross run"), notes=_records_note,
                family=sections.LOGIT_DYNAMICS, caption="Top-n replacement and argmax change rate at every low-overlap "
                "position (within- and cross-run)."),
    Measurement(name="reorg_st_all", label="tab:reorg_st_all", title="Top-n replacement at every stable position.",
                requires=("iterations",), compute=_reorg("all", "stable"),
                tidy=quantities("quantity", WITHIN_CROSS, "comparison"),
                columns=grouped("comparison", "within or cross run"), notes=_records_note,
                family=sections.LOGIT_DYNAMICS, caption="Top-n replacement and argmax change rate at every stable "
                "position (within- and cross-run)."),
    Measurement(name="basin_shift_activity", label="tab:basin_shift_activity", title="Basin shifts across consecutive "
                "iteration transitions of the deepest run.", requires=("iterations",),
                compute=lambda a: basin_shift_activity(a.regime_labels()),
                tidy=lambda r: tidy.categories(r.table(), "activity", {"count": "n_positions", "percent": "percent",
                                                                       "ci_low": "ci_low_pct",
                                                                       "ci_high": "ci_high_pct"}),
                columns={"category": "activity key", "category_text": "the paper's row", "n_positions": "positions",
                         "percent": "percent", "ci_low_pct": "95% bound", "ci_high_pct": "95% bound"},
                notes=_threshold_note, family=sections.LOGIT_DYNAMICS, caption="Basin shifts of the deepest run across "
                "consecutive iteration transitions: sustained, first transition only, or new at a later transition."),
    Measurement(name="later_iter_computation", label="tab:later_iter_computation", title="Later-iteration computation "
                "by regime.", requires=("iterations",), compute=_records(later_iter_computation),
                tidy=quantities("quantity", ("basin_shift", "stable"), "regime"),
                columns=grouped("regime", "basin_shift or stable"), notes=_records_note, family=sections.LOGIT_DYNAMICS,
                caption="Later-iteration computation by regime: cumulative log-prob shift ratios, reversal rates, "
                "argmax re-changes and question-level stabilisation."),
)
