"""The artefact registry covers every figure and table label of the paper, and binds specs to runs and
checkpoints with unique names."""

from __future__ import annotations

import pytest

from sst_interp.kernels.errors import UsageError
from sst_interp.reporting.registry import UNSUPPORTED, all_specs, plan
from sst_interp.reporting.build import select

#: Every \label{fig:...} and \label{tab:...} of paper/sst_v2.tex.
PAPER_LABELS = """
fig:architecture fig:alpha_quantile_ribbon fig:alpha_pca_trajectory fig:alpha_combined fig:overlap_heatmap
fig:layer_profile tab:main_results tab:staged_breakdown tab:external_gsm8k tab:external_gpqa tab:overthinking
fig:overthinking_sankey tab:repetition fig:convergence_monitoring tab:halting_probe fig:feature_position_grid
tab:hyperparameters tab:alpha_init_ablation tab:ema_variant_ablation fig:sst_vs_baseline_training_loss
fig:sst_vs_baseline_validation_loss fig:sst_vs_baseline_loss fig:sst_vs_nobias_loss fig:sst_loss_standalone
fig:baseline_loss_standalone fig:alpha_global_stats_over_training fig:alpha_panels_raw_selected
fig:alpha_panels_deviation_selected fig:alpha_specialisation_profile fig:alpha_panels_raw_full
fig:alpha_panels_deviation_full fig:overlap_heatmap_zoom fig:layer_profile_per_position fig:layer_profile_512pos
tab:argmax_concentration tab:decision_boundary tab:convergent_reasoning tab:pos0_divergence tab:basin_shift_activity
tab:later_iter_computation tab:reorg_lo_argmax tab:reorg_st_argmax tab:reorg_lo_all tab:reorg_st_all
tab:causal_ordering tab:gap_distributions tab:precision_proof tab:halting_probe_layer_sweep
tab:halting_probe_per_iter fig:halt_signal tab:halting_probe_ablation_sweep tab:halting_probe_topk_sweep
tab:halting_probe_greedy_prune
""".split()
#: Sub-figure labels drawn as one figure with their parent.
PANELS = {"fig:alpha_combined": ("fig:alpha_quantile_ribbon", "fig:alpha_pca_trajectory"),
          "fig:sst_vs_baseline_training_loss": ("fig:sst_vs_baseline_loss",),
          "fig:sst_vs_baseline_validation_loss": ("fig:sst_vs_baseline_loss",)}


def test_every_paper_label_is_produced_or_listed_as_unsupported():
    made = {s.label for s in all_specs() if s.label}
    listed = {name.replace("_", ":", 1) for name in UNSUPPORTED}
    for label in PAPER_LABELS:
        covered = label in made or label in listed or all(p in made for p in PANELS.get(label, ("-",)))
        assert covered, f"{label} is neither produced nor listed as unsupported"
    assert made <= set(PAPER_LABELS), f"labels not in the paper: {made - set(PAPER_LABELS)}"


def test_names_follow_labels_and_are_unique():
    specs = all_specs()
    assert len({s.name for s in specs}) == len(specs)
    for s in specs:
        assert s.name.startswith(("tab_", "fig_")) and s.name.startswith(s.kind[:3] if s.kind == "figure" else "tab")
        if s.label:
            assert s.name == s.label.replace(":", "_")


def test_plan_suffixes_run_and_checkpoint_targets_only_when_there_are_several():
    specs = [s for s in all_specs() if s.name in ("tab_main_results", "tab_overthinking", "fig_alpha_quantile_ribbon")]
    one = plan(specs, ["gpqa"], ["/c/ckpt_a"])
    assert [(a.name, a.target) for a in one] == [("tab_main_results", None), ("tab_overthinking", "gpqa"),
                                                 ("fig_alpha_quantile_ribbon", "/c/ckpt_a")]
    two = plan(specs, ["gpqa", "gsm8k"], ["/c/ckpt_a", "/d/ckpt b"])
    assert [a.name for a in two] == ["tab_main_results", "tab_overthinking-gpqa", "tab_overthinking-gsm8k",
                                     "fig_alpha_quantile_ribbon-ckpt_a", "fig_alpha_quantile_ribbon-ckpt_b"]
    assert two[1].label == "tab:overthinking-gpqa"
    none = plan(specs, ["gpqa"], [])
    assert [(a.name, a.target) for a in none][-1] == ("fig_alpha_quantile_ribbon", None)


def test_only_selects_by_name_or_glob_and_rejects_unknown_patterns():
    arts = plan(all_specs(), ["a", "b"], [])
    chosen, unsupported = select(arts, ["fig_layer_profile*", "tab_overthinking", "tab_external_*"])
    assert sorted(a.name for a in chosen) == [
        "fig_layer_profile-a", "fig_layer_profile-b", "fig_layer_profile_512pos-a", "fig_layer_profile_512pos-b",
        "fig_layer_profile_per_position-a", "fig_layer_profile_per_position-b", "tab_overthinking-a",
        "tab_overthinking-b"]
    assert [a.name for a in chosen] == [a.name for a in arts if a in chosen]  # page order is kept
    assert set(unsupported) == {"tab_external_gsm8k", "tab_external_gpqa"}
    chosen, unsupported = select(arts, [])
    assert len(chosen) == len(arts) and unsupported == UNSUPPORTED
    with pytest.raises(UsageError, match="tab_nope"):
        select(arts, ["tab_nope"])
