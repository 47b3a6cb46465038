"""Precision proof (app:precision_proof) and L2 convergence monitoring (fig:convergence_monitoring)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sst_interp.analyses.results import NotApplicable
from sst_interp.reporting import fig_monitoring
from sst_interp.reporting.artefacts import ArtefactData, ArtefactSpec
from sst_interp.reporting.context import ReportContext
from sst_interp.reporting.measured import measured_spec

FAMILY = "Precision and convergence monitoring"


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


SPECS: list[ArtefactSpec] = [
    measured_spec("tab:precision_proof", FAMILY,
                  "Per-layer ratio of the iteration 1 -> 2 hidden-state change to the dtype's rounding error at "
                  "basin-shift positions; under the rounding null the ratio is <= 1.", ("run", "checkpoint")),
    ArtefactSpec("fig_convergence_monitoring", "figure", "fig:convergence_monitoring", FAMILY,
                 "L2 delta between successive iterations by correct depth (a), and the current delta against the "
                 "next step's outcome (b): L2 does not tell when to stop.", "run", ("run",), convergence_figure,
                 fig_monitoring.draw_convergence),
    measured_spec("convergence_monitoring", FAMILY,
                  "Tests behind the convergence figure: Kruskal-Wallis across correct depths per transition, and "
                  "Mann-Whitney / AUROC of the current delta for improving vs degrading steps."),
]
