"""The artefact registry covers every figure and table label of the paper, and binds specs to runs and
checkpoints with unique names."""

from __future__ import annotations

from pathlib import Path

import pytest

from sst_interp.kernels.errors import UsageError
from sst_interp.reporting.registry import UNSUPPORTED, all_specs, plan
from sst_interp.reporting.build import select

REPO = Path(__file__).resolve().parents[3]
#: Every \label{fig:...} and \label{tab:...} of the paper, kept in the repository (labels only).
PAPER_LABELS = [line.strip() for line in (REPO / "tests/data/paper_labels.txt").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
#: Sub-figure labels drawn as one figure with their parent.
PANELS = {"fig:alpha_combined": ("fig:alpha_quantile_ribbon", "fig:alpha_pca_trajectory")}
#: The only labels the report does not write as an artefact of their own: a diagram, and the two-panel wrapper of
#: two produced figures.
NOT_PRODUCED = {"fig:architecture", "fig:alpha_combined"}


def test_every_paper_label_is_produced_or_listed_as_unsupported():
    made = {s.label for s in all_specs() if s.label}
    listed = {name.replace("_", ":", 1) for name in UNSUPPORTED}
    for label in PAPER_LABELS:
        covered = label in made or label in listed or all(p in made for p in PANELS.get(label, ("-",)))
        assert covered, f"{label} is neither produced nor listed as unsupported"
    assert made <= set(PAPER_LABELS), f"labels not in the paper: {made - set(PAPER_LABELS)}"


def test_every_paper_label_but_the_diagram_and_a_wrapper_is_an_artefact_of_the_report():
    assert len(PAPER_LABELS) == len(set(PAPER_LABELS)) == 53
    made = {s.label for s in all_specs() if s.label}
    assert set(PAPER_LABELS) - made == NOT_PRODUCED
    assert all(p in made for p in PANELS["fig:alpha_combined"])
    assert set(UNSUPPORTED) == {"fig_architecture"}


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
    chosen, unsupported = select(arts, ["fig_layer_profile*", "tab_overthinking", "tab_external_*", "fig_arch*"])
    assert sorted(a.name for a in chosen) == [
        "fig_layer_profile-a", "fig_layer_profile-b", "fig_layer_profile_512pos-a", "fig_layer_profile_512pos-b",
        "fig_layer_profile_per_position-a", "fig_layer_profile_per_position-b", "tab_external_comparison",
        "tab_external_gpqa", "tab_external_gsm8k", "tab_overthinking-a", "tab_overthinking-b"]
    assert [a.name for a in chosen] == [a.name for a in arts if a in chosen]  # page order is kept
    assert set(unsupported) == {"fig_architecture"}
    chosen, unsupported = select(arts, [])
    assert len(chosen) == len(arts) and unsupported == UNSUPPORTED
    with pytest.raises(UsageError, match="tab_nope"):
        select(arts, ["tab_nope"])
