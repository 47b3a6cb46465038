"""tab_family_convergence: how fast a run's carried state settles, on a planted state whose relative changes are
exact (each iteration scales the previous state, so the top-k set never moves and ||s_i - s_{i-1}|| / ||s_{i-1}||
is the scale minus one)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from sst_interp.analyses import sections
from sst_interp.analyses.families import convergence_profile
from sst_interp.catalogue import lookup
from sst_interp.kernels.results import NotApplicable
from sst_interp.reporting.registry import all_specs

#: Scale of each iteration over the previous one: relative changes 1, 0.5, 0.25 (iterations 2, 3, 4).
SCALES = (2.0, 1.5, 1.25)


def planted_run(scales: tuple[float, ...] = SCALES, family: str | None = "hrm_text", positions: int = 3,
                d: int = 8) -> SimpleNamespace:
    """A fake run whose state layer holds ``start * prod(scales[:i])`` at iteration i + 1 (what state_profile
    reads: depths, manifest, num_layers, hidden)."""
    start = np.random.default_rng(0).normal(size=(positions, d))
    states = [start]
    for scale in scales:
        states.append(states[-1] * scale)
    values = np.stack(states, axis=1)[:, :, None, :]  # [positions, iterations, layers=1, d]
    manifest = {"depths": [1, len(states)], "full_positions": positions, "sketch_k": 4, "sst": {"layers": [0]},
                **({"family": family} if family else {})}
    return SimpleNamespace(depths=[1, len(states)], manifest=manifest, num_layers=1,
                           hidden=lambda depth, layers: [SimpleNamespace(values=values)])


def test_the_planted_changes_come_back_exactly():
    table = convergence_profile(planted_run(), "loop")
    assert isinstance(table, pd.DataFrame) and len(table) == 1
    row = table.iloc[0]
    assert (row["run"], row["family"], row["depth"], row["n_positions"]) == ("loop", "hrm_text", 4, 3)
    assert row["first_change"] == pytest.approx(1.0, rel=1e-12)
    assert row["last_change"] == pytest.approx(0.25, rel=1e-12)
    assert row["last_over_first"] == pytest.approx(0.25, rel=1e-12)
    assert row["half_change_iteration"] == 3  # 0.5 <= 1.0 / 2 first at the transition 2 -> 3
    assert (row["first_overlap"], row["last_overlap"]) == (1.0, 1.0)  # scaling never moves the top-k set


def test_a_state_that_never_halves_its_change_has_no_half_change_iteration():
    row = convergence_profile(planted_run(scales=(2.0, 2.0, 2.0), family=None), "sst_run").iloc[0]
    assert row["family"] == "sst"
    assert (row["first_change"], row["last_change"]) == (pytest.approx(1.0), pytest.approx(1.0))
    assert np.isnan(row["half_change_iteration"])


def test_a_single_depth_run_says_why():
    run = SimpleNamespace(depths=[1], manifest={"full_positions": 2}, num_layers=1)
    result = convergence_profile(run, "flat")
    assert isinstance(result, NotApplicable) and "depth >= 2" in result.reason


def test_the_entry_stacks_every_run_of_a_comparison_and_names_the_runs_it_leaves_out():
    entry = lookup("tab_family_convergence")
    flat = SimpleNamespace(depths=[1], manifest={"full_positions": 2}, num_layers=1)
    comparison = SimpleNamespace(runs={"loop": planted_run(), "sst_run": planted_run((2.0, 2.0, 2.0), None),
                                       "flat": flat})
    frame, notes = entry.present(entry.compute(comparison))
    assert frame["run"].tolist() == ["loop", "sst_run"] and frame["family"].tolist() == ["hrm_text", "sst"]
    assert frame["last_over_first"].tolist() == pytest.approx([0.25, 1.0])
    assert notes == ["runs left out: flat: run has depths [1]; a state profile needs a depth >= 2"]
    assert list(entry.tidy(entry.compute(comparison)).columns) == list(entry.columns)
    assert isinstance(entry.compute(SimpleNamespace(runs={"flat": flat})), NotApplicable)


def test_the_catalogue_entry_puts_it_on_the_report_page():
    entry = lookup("tab_family_convergence")
    assert (entry.scope, entry.kind, entry.family) == ("comparison", "table", sections.ACROSS_FAMILIES)
    spec = next(s for s in all_specs() if s.name == "tab_family_convergence")
    assert (spec.caption, spec.family, spec.scope, spec.needs) == (entry.caption, entry.family, "comparison",
                                                                    ("runs",))
