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
