"""Logit-dynamics tables (sec:logit_dynamics, app:logit_methodology, app:logit_tables), from one set of comparison
records per run (regime labels at the run's GMM threshold). Each is a registry measurement
(:mod:`sst_interp.analyses.registry`); this module gives each its place and caption on the page."""

from __future__ import annotations

from sst_interp.reporting.artefacts import ArtefactSpec
from sst_interp.reporting.measured import measured_spec

FAMILY = "Logit dynamics"

SPECS: list[ArtefactSpec] = [
    measured_spec("tab:argmax_concentration", FAMILY,
                  "Argmax change rates at low-overlap vs stable positions (cross-run, all depth pairs, "
                  "pre-divergence), with the odds ratio."),
    measured_spec("tab:decision_boundary", FAMILY,
                  "Exact ties vs strict overrides among argmax changes, and the top-1 log-prob shift at changes vs "
                  "non-changes (cross-run)."),
    measured_spec("tab:gap_distributions", FAMILY,
                  "Top-1 minus top-2 gap at argmax-changing positions by regime (within-run, iter 1 vs later "
                  "iterations)."),
    measured_spec("tab:reorg_lo_argmax", FAMILY,
                  "Posterior reorganisation at low-overlap argmax changes: top-n replacement, top-5 rank shifts, "
                  "argmax suppression, rank of the new winner (within- and cross-run)."),
    measured_spec("tab:reorg_st_argmax", FAMILY,
                  "Posterior reorganisation at stable argmax changes (within- and cross-run)."),
    measured_spec("tab:reorg_lo_all", FAMILY,
                  "Top-n replacement and argmax change rate at every low-overlap position (within- and cross-run)."),
    measured_spec("tab:reorg_st_all", FAMILY,
                  "Top-n replacement and argmax change rate at every stable position (within- and cross-run)."),
    measured_spec("tab:basin_shift_activity", FAMILY,
                  "Basin shifts of the deepest run across consecutive iteration transitions: sustained, first "
                  "transition only, or new at a later transition."),
    measured_spec("tab:later_iter_computation", FAMILY,
                  "Later-iteration computation by regime: cumulative log-prob shift ratios, reversal rates, argmax "
                  "re-changes and question-level stabilisation."),
]
