"""Figure styles: the name a measurement's ``figure`` field gives -> the drawer that draws its data.

A measurement says how it is drawn by name (:attr:`sst_interp.analyses.measurement.Measurement.figure`) so that
:mod:`sst_interp.analyses` never imports matplotlib; this table is the one place a name meets its drawer. A new
measurement drawn like an existing one names that style; a new look adds one drawer and one row here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sst_interp.reporting import (
    fig_alpha,
    fig_basins,
    fig_comparisons,
    fig_depth,
    fig_evaluation,
    fig_features,
    fig_monitoring,
    fig_probe,
)
from sst_interp.reporting.artefacts import ArtefactData

STYLES: dict[str, Callable[[ArtefactData], Any]] = {
    "sankey": fig_evaluation.draw_sankey,
    "overlap_heatmap": fig_basins.draw_heatmap,
    "layer_profiles": fig_basins.draw_profiles,
    "convergence": fig_monitoring.draw_convergence,
    "policy_histogram": fig_depth.draw_histogram,
    "halt_signal": fig_probe.draw_halt_signal,
    "feature_grid": fig_probe.draw_feature_grid,
    "feature_trajectories": fig_features.draw_trajectories,
    "alpha_ribbon": fig_alpha.draw_ribbon,
    "alpha_pca": fig_alpha.draw_pca,
    "alpha_panels_raw": fig_alpha.draw_panels_raw,
    "alpha_panels_deviation": fig_alpha.draw_panels_deviation,
    "alpha_specialisation": fig_alpha.draw_specialisation,
    "losses": fig_alpha.draw_losses,
    "alpha_training": fig_alpha.draw_alpha_training,
    "loss_pair": fig_comparisons.draw_both,
    "training_loss": fig_comparisons.draw_training,
    "validation_loss": fig_comparisons.draw_validation,
}


def drawer(style: str, artefact: str) -> Callable[[ArtefactData], Any]:
    """The drawer of ``style`` (the figure ``artefact`` names it).

    Raises:
        ValueError: no such style (the known ones are listed).
    """
    if style not in STYLES:
        raise ValueError(f"{artefact}: unknown figure style {style!r}; known: {', '.join(sorted(STYLES))}")
    return STYLES[style]
