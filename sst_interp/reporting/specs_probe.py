"""Halting-probe artefacts (sec:halting_probe, app:halting): evaluation, per-iteration detection, halt signal, LOOCV,
layer sweep, neuron ablations, input-dimension sweep, greedy pruning and the feature grid.

Each is a registry entry declared in :mod:`sst_interp.probe.measurements` (where the probe is chosen: ``--probe``
when given, else a 10-neuron probe trained on the run's MUST HALT labels; the neuron analysis reads a 64-neuron
probe, as the paper's does); a spec here adds only its section, caption and drawing.

Evidence rule (issue 12): in-sample separation (a probe scored on the timesteps it was trained on) is never evidence
of a halting feature: the in-sample tables and fig:halt_signal say so. Generalisation is read from the LOOCV
permutation p-value (the paper's binomial p is shown beside it, uncalibrated) and the layer sweep ranks layers by
held-out (question-fold cross-fitted) scores over the whole depth.
"""

from __future__ import annotations

from sst_interp.reporting import fig_probe
from sst_interp.reporting.artefacts import ArtefactSpec
from sst_interp.reporting.measured import measured_figure_spec, measured_spec

FAMILY = "Halting probe"
INPUTS = ("run", "probe")


SPECS: list[ArtefactSpec] = [
    measured_spec("tab:halting_probe", FAMILY,
                  "Halting by the probe, in sample (the probe is scored on the questions it was trained on): accuracy "
                  "against iter=1 and the staged capacity, overthinks (continued past a passing depth) and misses "
                  "(halted too early). Not evidence of generalisation: see the LOOCV permutation test.", INPUTS),
    measured_spec("tab:halting_probe_per_iter", FAMILY,
                  "MUST HALT detection and SAFE timesteps left alone, per iteration depth, in sample (not evidence of "
                  "generalisation).", INPUTS),
    measured_figure_spec("fig:halt_signal", FAMILY,
                         "In-sample probe logit at every labelled timestep (the probe was trained on these "
                         "timesteps, so the separation shown is not evidence of a feature; see the LOOCV permutation "
                         "test): histogram by class, per-question strip, and each timestep at its depth with "
                         "detected halts, harmless false halts and missed continues.", fig_probe.draw_halt_signal,
                         INPUTS),
    measured_spec("tab_halting_probe_loocv", FAMILY,
                  "Leave-one-MUST-HALT-question-out cross-validation: held-out questions correctly halted, with the "
                  "calibrated label-permutation p (every fold retrained per permutation; read significance here) and "
                  "the paper's binomial p against the in-sample base rate (reproduces the paper, not calibrated).",
                  INPUTS),
    measured_spec("tab:halting_probe_layer_sweep", FAMILY,
                  "A 64-neuron probe trained at every layer (an even grid of 16 above 32 layers): in-sample "
                  "evaluation and held-out (question-fold cross-fitted) scores; the layer is chosen by the held-out "
                  "result, named in the notes.", INPUTS),
    measured_spec("tab:halting_probe_ablation_sweep", FAMILY,
                  "Neuron ablations of the 64-neuron probe: keep the top-N neurons by logit contribution, remove the "
                  "top neuron, or keep only it.", INPUTS),
    measured_spec("tab:halting_probe_topk_sweep", FAMILY,
                  "Inference-only input ablation: keep the top-K hidden dimensions by weight importance, zero the "
                  "rest.", INPUTS),
    measured_spec("tab:halting_probe_greedy_prune", FAMILY,
                  "Greedy pruning of the top-K set to the essential dimensions the probe cannot lose.", INPUTS),
    measured_figure_spec("fig:feature_position_grid", FAMILY,
                         "The essential hidden-state dimensions on a grid of the position-0 state (dim 0 at the "
                         "bottom left), coloured by weight importance.", fig_probe.draw_feature_grid, INPUTS),
]
