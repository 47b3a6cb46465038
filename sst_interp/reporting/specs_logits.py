"""Logit-dynamics tables (sec:logit_dynamics, app:logit_methodology, app:logit_tables), from one set of comparison
records per run (regime labels at the run's GMM threshold)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sst_interp.analyses import logit_dynamics as ld
from sst_interp.analyses.results import NotApplicable
from sst_interp.reporting.artefacts import ArtefactData, ArtefactSpec, table_data
from sst_interp.reporting.context import ReportContext

FAMILY = "Logit dynamics"


def _needs_iterations(ctx: ReportContext, target: str | None, label: str) -> NotApplicable | None:
    run = ctx.run_input(target).run
    if max(run.depths, default=0) < 2:
        return NotApplicable(f"run has depths {run.depths}; logit dynamics compare iterations (need a depth >= 2)",
                             label)
    return None


def _from_records(build: Callable[[Any], Any], label: str) -> Callable[[ReportContext, str | None], Any]:
    def compute(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
        missing = _needs_iterations(ctx, target, label)
        if missing is not None:
            return missing
        threshold, origin = ctx.threshold(target)
        recs = ctx.records(target)
        return table_data(build(recs), [f"regimes at overlap threshold {threshold:.4f} ({origin}); window "
                                        f"{recs.max_positions} positions, top-{recs.top_n} comparisons"])

    compute.__doc__ = f"{label} from the run's comparison records."
    return compute


def basin_shift_activity(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
    """tab:basin_shift_activity from the regime labels of the deepest run's consecutive transitions."""
    missing = _needs_iterations(ctx, target, "tab:basin_shift_activity")
    if missing is not None:
        return missing
    threshold, origin = ctx.threshold(target)
    return table_data(ld.basin_shift_activity(ctx.labels(target)),
                      [f"regimes at overlap threshold {threshold:.4f} ({origin})"])


def _spec(name: str, caption: str, build: Callable[[Any], Any]) -> ArtefactSpec:
    label = name.replace("_", ":", 1)
    return ArtefactSpec(name, "table", label, FAMILY, caption, "run", ("run",), _from_records(build, label))


SPECS: list[ArtefactSpec] = [
    _spec("tab_argmax_concentration",
          "Argmax change rates at low-overlap vs stable positions (cross-run, all depth pairs, pre-divergence), with "
          "the odds ratio.", ld.argmax_concentration),
    _spec("tab_decision_boundary",
          "Exact ties vs strict overrides among argmax changes, and the top-1 log-prob shift at changes vs "
          "non-changes (cross-run).", ld.decision_boundary),
    _spec("tab_gap_distributions",
          "Top-1 minus top-2 gap at argmax-changing positions by regime (within-run, iter 1 vs later iterations).",
          ld.gap_distributions),
    _spec("tab_reorg_lo_argmax",
          "Posterior reorganisation at low-overlap argmax changes: top-n replacement, top-5 rank shifts, argmax "
          "suppression, rank of the new winner (within- and cross-run).", lambda r: ld.reorg_argmax(r, ld.LOW)),
    _spec("tab_reorg_st_argmax",
          "Posterior reorganisation at stable argmax changes (within- and cross-run).",
          lambda r: ld.reorg_argmax(r, ld.STABLE)),
    _spec("tab_reorg_lo_all",
          "Top-n replacement and argmax change rate at every low-overlap position (within- and cross-run).",
          lambda r: ld.reorg_all(r, ld.LOW)),
    _spec("tab_reorg_st_all",
          "Top-n replacement and argmax change rate at every stable position (within- and cross-run).",
          lambda r: ld.reorg_all(r, ld.STABLE)),
    ArtefactSpec("tab_basin_shift_activity", "table", "tab:basin_shift_activity", FAMILY,
                 "Basin shifts of the deepest run across consecutive iteration transitions: sustained, first "
                 "transition only, or new at a later transition.", "run", ("run",), basin_shift_activity),
    _spec("tab_later_iter_computation",
          "Later-iteration computation by regime: cumulative log-prob shift ratios, reversal rates, argmax "
          "re-changes and question-level stabilisation.", ld.later_iter_computation),
]
