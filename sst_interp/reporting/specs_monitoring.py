"""Precision proof (app:precision_proof) and L2 convergence monitoring (fig:convergence_monitoring)."""

from __future__ import annotations

from sst_interp.reporting import fig_monitoring
from sst_interp.reporting.artefacts import ArtefactSpec
from sst_interp.reporting.measured import measured_figure_spec, measured_spec

FAMILY = "Precision and convergence monitoring"


SPECS: list[ArtefactSpec] = [
    measured_spec("tab:precision_proof", FAMILY,
                  "Per-layer ratio of the iteration 1 -> 2 hidden-state change to the dtype's rounding error at "
                  "basin-shift positions; under the rounding null the ratio is <= 1.", ("run", "checkpoint")),
    measured_figure_spec("fig:convergence_monitoring", FAMILY,
                         "L2 delta between successive iterations by correct depth (a), and the current delta against "
                         "the next step's outcome (b): L2 does not tell when to stop.", fig_monitoring.draw_convergence),
    measured_spec("convergence_monitoring", FAMILY,
                  "Tests behind the convergence figure: Kruskal-Wallis across correct depths per transition, and "
                  "Mann-Whitney / AUROC of the current delta for improving vs degrading steps."),
]
