"""The artefact registry: every spec the report knows, in page order, and binding specs to their targets.

Most artefacts are catalogue measurements with a caption (:func:`sst_interp.reporting.measured.measured_specs`:
the entry says its section, caption and figure style). The few hand-written specs are the report's own cross-run
artefacts: each ``specs_*`` module defines ``SPECS`` (tables and figures that stack every run or experiment folder of
the report). This module collects both; it sits above them in the import graph (they import the data classes from
:mod:`sst_interp.reporting.artefacts`, never this module), so there is no cycle.
"""

from __future__ import annotations

import re
from pathlib import Path

from sst_interp.reporting import specs_depth, specs_evaluation, specs_families, specs_interventions
from sst_interp.reporting.artefacts import FAMILIES, Artefact, ArtefactSpec
from sst_interp.reporting.measured import measured_specs

#: Paper artefacts no run can support, with the reason (listed on the page, never produced).
UNSUPPORTED: dict[str, str] = {
    "fig_architecture": "a schematic of the architecture, not a measurement",
}

#: The order of the page within each section (sections in :data:`FAMILIES` order). An artefact not named here
#: (a new measurement) follows the named ones of its section, in catalogue order.
PAGE: tuple[str, ...] = (
    "tab_main_results", "tab_staged_breakdown", "tab_overthinking", "fig_overthinking_sankey", "tab_repetition",
    "tab_episode_conduct", "fig_overlap_heatmap", "fig_overlap_heatmap_zoom", "fig_layer_profile",
    "fig_layer_profile_per_position", "fig_layer_profile_512pos", "tab_gmm", "tab_gmm_robustness",
    "tab_basin_summary", "tab_basin_position_rates", "tab_pos0_universality", "tab_convergent_reasoning",
    "tab_causal_ordering", "tab_pos0_divergence", "tab_argmax_concentration", "tab_decision_boundary",
    "tab_gap_distributions", "tab_reorg_lo_argmax", "tab_reorg_st_argmax", "tab_reorg_lo_all", "tab_reorg_st_all",
    "tab_basin_shift_activity", "tab_later_iter_computation", "tab_precision_proof", "fig_convergence_monitoring",
    "tab_convergence_monitoring", "tab_depth_pareto", "fig_depth_pareto_front", "fig_depth_policy_histogram",
    "tab_depth_policy_convergence", "tab_halting_probe", "tab_halting_probe_per_iter", "fig_halt_signal",
    "tab_halting_probe_loocv", "tab_halting_probe_layer_sweep", "tab_halting_probe_ablation_sweep",
    "tab_halting_probe_topk_sweep", "tab_halting_probe_greedy_prune", "fig_feature_position_grid",
    "fig_alpha_quantile_ribbon", "fig_alpha_pca_trajectory", "fig_alpha_panels_raw_selected",
    "fig_alpha_panels_deviation_selected", "fig_alpha_specialisation_profile", "fig_alpha_panels_raw_full",
    "fig_alpha_panels_deviation_full", "fig_sst_vs_baseline_loss", "fig_sst_loss_standalone",
    "fig_baseline_loss_standalone", "fig_alpha_global_stats_over_training", "tab_hyperparameters",
    "fig_sst_vs_nobias_loss", "fig_sst_vs_baseline_training_loss", "fig_sst_vs_baseline_validation_loss",
    "tab_intervention_window", "tab_intervention_trace", "fig_intervention_trace_heatmap", "tab_intervention_steer",
    "tab_intervention_attribution", "fig_family_state", "fig_family_capacity", "tab_alpha_init_ablation",
    "tab_ema_variant_ablation", "tab_external_gsm8k", "tab_external_gpqa", "tab_external_comparison",
)


def all_specs() -> list[ArtefactSpec]:
    """Every spec, in page order: the catalogue's and the hand-written ones, by section, then :data:`PAGE`."""
    specs = [*specs_evaluation.SPECS, *specs_depth.SPECS, *specs_interventions.SPECS, *specs_families.SPECS,
             *measured_specs()]
    names = [s.name for s in specs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"duplicate artefact names {sorted(dup)}")
    return sorted(specs, key=lambda s: (FAMILIES.index(s.family), PAGE.index(s.name) if s.name in PAGE else len(PAGE)))


def plan(specs: list[ArtefactSpec], run_names: list[str], checkpoints: list[str]) -> list[Artefact]:
    """Bind specs to targets: one per run for ``run`` scope, one per checkpoint for ``checkpoint`` scope."""
    out: list[Artefact] = []
    for spec in specs:
        if spec.scope == "run":
            for name in run_names:
                out.append(Artefact(spec, spec.name if len(run_names) == 1 else f"{spec.name}-{name}", name))
        elif spec.scope == "checkpoint":
            if not checkpoints:
                out.append(Artefact(spec, spec.name, None))
            for ckpt in checkpoints:
                suffix = "" if len(checkpoints) == 1 else "-" + (re.sub(r"[^A-Za-z0-9_.]+", "_", Path(ckpt).name)
                                                                 or "checkpoint")
                out.append(Artefact(spec, spec.name + suffix, ckpt))
        else:
            out.append(Artefact(spec, spec.name, None))
    return out
