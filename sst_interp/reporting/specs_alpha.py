"""Learned blend coefficients (sec:learned_alpha, app:alpha_analysis) from an SST checkpoint, and the training
curves (fig:sst_vs_baseline_loss and the standalone curves, fig:alpha_global_stats_over_training) from training
logs.

Each is a registry entry of checkpoint or training scope (:mod:`sst_interp.analyses.registry`, computed by
:mod:`sst_interp.analyses.checkpoint_figures`); a spec here adds only its section, caption and drawing.
"""

from __future__ import annotations

from sst_interp.reporting import fig_alpha
from sst_interp.reporting.artefacts import ArtefactSpec
from sst_interp.reporting.measured import measured_figure_spec

FAMILY = "Learned blend coefficients and training"

SPECS: list[ArtefactSpec] = [
    measured_figure_spec("fig:alpha_quantile_ribbon", FAMILY,
                         "Within-layer percentile bands (p5-p95, p25-p75, median) of the learned blend coefficients, "
                         "with alpha_init.", fig_alpha.draw_ribbon),
    measured_figure_spec("fig:alpha_pca_trajectory", FAMILY,
                         "Each layer's deviation from alpha_init on the top principal components, coloured by layer "
                         "and joined in depth order.", fig_alpha.draw_pca),
    measured_figure_spec("fig:alpha_panels_raw_selected", FAMILY,
                         "Raw alpha of four representative layers reshaped to a grid, on a shared p1-p99 colour "
                         "scale.", fig_alpha.draw_panels_raw),
    measured_figure_spec("fig:alpha_panels_deviation_selected", FAMILY,
                         "Deviation alpha - alpha_init of the same four layers on a shared diverging scale (red "
                         "above, blue below).", fig_alpha.draw_panels_deviation),
    measured_figure_spec("fig:alpha_specialisation_profile", FAMILY,
                         "Within-layer percentiles of |alpha - alpha_init| across depth; the selected layers are "
                         "marked.", fig_alpha.draw_specialisation),
    measured_figure_spec("fig:alpha_panels_raw_full", FAMILY, "Raw alpha of every layer on a shared colour scale.",
                         fig_alpha.draw_panels_raw),
    measured_figure_spec("fig:alpha_panels_deviation_full", FAMILY,
                         "Deviation from alpha_init of every layer on a shared scale.", fig_alpha.draw_panels_deviation),
    measured_figure_spec("fig:sst_vs_baseline_loss", FAMILY,
                         "Training loss (raw, light; moving average, solid) and validation loss of the SST and the "
                         "matched baseline.", fig_alpha.draw_losses),
    measured_figure_spec("fig:sst_loss_standalone", FAMILY, "SST training and validation loss.",
                         fig_alpha.draw_losses),
    measured_figure_spec("fig:baseline_loss_standalone", FAMILY, "Matched baseline training and validation loss.",
                         fig_alpha.draw_losses),
    measured_figure_spec("fig:alpha_global_stats_over_training", FAMILY,
                         "Whole-model blend coefficient statistics (mean +- std, min, max) per training step.",
                         fig_alpha.draw_alpha_training),
]
