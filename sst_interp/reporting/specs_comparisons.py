"""Artefacts that compare several runs, trainings or published results (app:ablations, app:training_setup,
app:training_curves, sec:external).

Each is a registry entry of ``comparison`` scope (:mod:`sst_interp.analyses.comparisons`); a spec here adds only its
section, caption and drawing.
"""

from __future__ import annotations

from sst_interp.reporting import fig_comparisons
from sst_interp.reporting.artefacts import ArtefactSpec
from sst_interp.reporting.measured import measured_figure_spec, measured_spec

FAMILY = "Ablations and external comparison"
TRAINING = "Learned blend coefficients and training"


SPECS: list[ArtefactSpec] = [
    measured_spec("tab:alpha_init_ablation", FAMILY,
           "Alpha initialisation ablation (staged compute): the SST with theta_init = -1.8 against the unbiased "
           "initialisation, per iteration stage, with the deltas and exact McNemar tests on the paired flips.",
           ("runs", "baseline")),
    measured_spec("tab:ema_variant_ablation", FAMILY,
           "Linked blend EMA variant (staged compute): the SST with the direct update against the EMA variant, with "
           "the matched baseline, the deltas and exact McNemar tests on the paired flips.", ("runs", "baseline")),
    measured_spec("tab:external_gsm8k", FAMILY,
           "External comparison on GSM8K: the SST's staged accuracy among published results (published, not "
           "recorded).", ("runs", "external")),
    measured_spec("tab:external_gpqa", FAMILY,
           "External comparison on GPQA-Diamond: the SST's staged accuracy among published results (published, not "
           "recorded).", ("runs", "external")),
    measured_spec("external_comparison", FAMILY,
           "A run of a benchmark without a paper table placed among the --external rows (published, not recorded).",
           ("runs", "external")),
    measured_spec("tab:hyperparameters", TRAINING,
           "Training hyperparameters of the SST and the matched baseline side by side, from their saved configs.",
           ("training",)),
    measured_figure_spec("fig:sst_vs_nobias_loss", TRAINING,
                         "SST vs the no-bias variant: training loss (raw, light; moving average, solid) and "
                         "validation loss, each curve labelled by its config.", fig_comparisons.draw_both,
                         ("training",)),
    measured_figure_spec("fig:sst_vs_baseline_training_loss", TRAINING,
                         "SST vs matched baseline: training loss, raw (light) and moving average (solid).",
                         fig_comparisons.draw_training, ("training",)),
    measured_figure_spec("fig:sst_vs_baseline_validation_loss", TRAINING,
                         "SST vs matched baseline: validation loss as evaluated.", fig_comparisons.draw_validation,
                         ("training",)),
]
