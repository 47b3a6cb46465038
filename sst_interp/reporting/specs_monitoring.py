"""Precision proof (app:precision_proof) and L2 convergence monitoring (fig:convergence_monitoring)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sst_interp.analyses.results import NotApplicable
from sst_interp.analyses.precision import precision_proof
from sst_interp.reporting import fig_monitoring
from sst_interp.reporting.artefacts import ArtefactData, ArtefactSpec, table_data
from sst_interp.reporting.context import ReportContext

FAMILY = "Precision and convergence monitoring"


def precision(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
    """tab:precision_proof at the run's basin-shift positions (iteration 1 -> 2 of the deepest run), with the
    analytic alpha bound when the run's checkpoint is available."""
    run = ctx.run_input(target).run
    if max(run.depths, default=0) < 2:
        return NotApplicable(f"run has depths {run.depths}; the precision test compares iterations 1 and 2",
                             "tab:precision_proof")
    alpha = ctx.alpha_for_run(target)
    result = precision_proof(run, ctx.labels(target), alpha=alpha.alpha if alpha is not None else None)
    if isinstance(result, NotApplicable):
        return result
    threshold, origin = ctx.threshold(target)
    notes = [f"dtype {result.dtype}: machine epsilon {result.eps:.3g}",
             f"iterations {result.transition[0]} -> {result.transition[1]} of the depth-{result.depth} run at "
             f"{result.positions} {'basin-shift' if result.restricted else 'recorded'} positions (threshold "
             f"{threshold:.4f}, {origin})",
             "p: one-sided exact binomial test of the fraction above 1x against 0.5; ci_low: its one-sided 95% bound"]
    if result.bound is not None:
        b = result.bound
        notes.append(f"analytic bound: alpha in [{b.minimum:.4g}, {b.maximum:.4g}], minimum = "
                     f"{b.minimum / b.eps:.3g} eps; {b.below.get(3.0, 0)} of {b.n} coefficients <= 3 eps")
    else:
        notes.append("analytic alpha bound omitted: no checkpoint for this run")
    return table_data(result, notes, layers=result.full_table())


def convergence_figure(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
    """fig:convergence_monitoring data: per-position L2 deltas by correct depth and the decision points."""
    result = ctx.convergence(target)
    if isinstance(result, NotApplicable):
        return result
    deltas = result.deltas  # [Q, P, T]
    q, p, t = deltas.shape
    traces = pd.DataFrame({
        "question_id": np.repeat(np.array(result.question_ids, dtype=object), p * t),
        "position": np.tile(np.repeat(result.positions, t), q),
        "transition": np.tile(np.arange(1, t + 1), q * p),
        "delta": deltas.reshape(-1),
        "correct_depth": np.repeat(result.groups, p * t),
    }).dropna(subset=["delta"])
    return ArtefactData({"traces": traces, "points": result.points, "profile": result.profile()}, {
        "layer": result.layer, "auroc": result.auroc_degrade, "mann_whitney_p": result.mann_whitney_p,
        "n_improves": result.n_improves, "n_degrades": result.n_degrades})


def convergence_table(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
    """The statistics behind fig:convergence_monitoring."""
    result = ctx.convergence(target)
    if isinstance(result, NotApplicable):
        return result
    return table_data(result, [f"L2 deltas at layer {result.layer}; one value per (question, decision) in the "
                               "tests"])


SPECS: list[ArtefactSpec] = [
    ArtefactSpec("tab_precision_proof", "table", "tab:precision_proof", FAMILY,
                 "Per-layer ratio of the iteration 1 -> 2 hidden-state change to the dtype's rounding error at "
                 "basin-shift positions; under the rounding null the ratio is <= 1.", "run", ("run", "checkpoint"),
                 precision),
    ArtefactSpec("fig_convergence_monitoring", "figure", "fig:convergence_monitoring", FAMILY,
                 "L2 delta between successive iterations by correct depth (a), and the current delta against the "
                 "next step's outcome (b): L2 does not tell when to stop.", "run", ("run",), convergence_figure,
                 fig_monitoring.draw_convergence),
    ArtefactSpec("tab_convergence_monitoring", "table", "", FAMILY,
                 "Tests behind the convergence figure: Kruskal-Wallis across correct depths per transition, and "
                 "Mann-Whitney / AUROC of the current delta for improving vs degrading steps.", "run", ("run",),
                 convergence_table),
]
