"""Basin-shift artefacts (sec:punctuated_equilibrium, app:gmm, app:mechanism): overlap heatmaps, layer profiles,
the GMM threshold and the low-overlap summaries. All read one
:func:`~sst_interp.analyses.basin_profiles.punctuated_equilibrium` per run; each is a registry measurement
(:mod:`sst_interp.analyses.registry`, figure data in :mod:`sst_interp.analyses.figure_data`), placed and captioned
here."""

from __future__ import annotations

from sst_interp.reporting import fig_basins
from sst_interp.reporting.artefacts import ArtefactSpec
from sst_interp.reporting.measured import measured_figure_spec, measured_spec

FAMILY = "Basin shifts (punctuated equilibrium)"


SPECS: list[ArtefactSpec] = [
    measured_figure_spec("fig:overlap_heatmap", FAMILY,
                         "Top-k overlap between the shallowest and deepest runs across layers and generated positions "
                         "for a representative question (sketch positions included); dark streaks are basin shifts.",
                         fig_basins.draw_heatmap),
    measured_figure_spec("fig:overlap_heatmap_zoom", FAMILY,
                         "The same overlap for a second question over the full-state window only (the question with "
                         "the most low-overlap positions).", fig_basins.draw_heatmap),
    measured_figure_spec("fig:layer_profile", FAMILY,
                         "Layer profile of top-k overlap at low-overlap positions: (a) position 0, (b) the last "
                         "window positions (pre-divergence); median with IQR, p10-p90 and p5-p95 bands.",
                         fig_basins.draw_profiles),
    measured_figure_spec("fig:layer_profile_per_position", FAMILY,
                         "Layer profile at low-overlap positions, one panel per window position (bands for N >= 5, "
                         "individual traces below).", fig_basins.draw_profiles),
    measured_figure_spec("fig:layer_profile_512pos", FAMILY,
                         "Layer profile over every low-overlap position of the long range (full window plus top-k "
                         "sketches).", fig_basins.draw_profiles),
    measured_spec("gmm", FAMILY,
                  "Two-component Gaussian mixture on the iter-1 vs iter-N overlaps: stable and low-overlap "
                  "components and their crossover threshold (app:gmm)."),
    measured_spec("gmm_robustness", FAMILY, "Crossover threshold of 2- to 5-component mixtures (app:gmm robustness)."),
    measured_spec("basin_summary", FAMILY,
                  "Low-overlap positions per question, per-position rates, gaps between consecutive low-overlap "
                  "positions and their coefficient of variation (sec:punctuated_equilibrium)."),
    measured_spec("basin_position_rates", FAMILY,
                  "Fraction of questions with a low-overlap (basin-shift) position at each window position."),
    measured_spec("pos0_universality", FAMILY,
                  "Position 0, iteration 1 vs 2: mean and std over questions of the layer-mean overlap and how many "
                  "questions are low-overlap there."),
    measured_spec("tab:causal_ordering", "Logit dynamics",
                  "Order of the first low-overlap position and the first argmax divergence between depths, per "
                  "question."),
    measured_spec("tab:pos0_divergence", "Logit dynamics",
                  "Downstream outcome of the questions with a basin shift at position 0: diverge at 0, inside the "
                  "window, or beyond it."),
]
