"""Figures by question (issue 31): ``a.data(label, question=..., depth=...)``, whose data carry question_id, depth,
turn and position; checked against the planted overlaps (exact: ``1 - |swaps_b - swaps_a| / k``)."""

from __future__ import annotations

import inspect

import numpy as np
import pandas as pd
import pytest

from sst_interp import analyses, study
from sst_interp.synthetic import write_synthetic_run
from tests.unit.analyses.demo_shaped import demo_spec


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    path = tmp_path_factory.mktemp("by_question") / "demo"
    return path, write_synthetic_run(path, demo_spec())


def test_the_zoomed_heatmap_of_a_chosen_question_and_depth_is_the_planted_overlap(planted):
    path, truth = planted
    a = study.open(path)
    q = 7
    for depth in (2, 3, 4):
        cells = a.data("fig:overlap_heatmap_zoom", question=truth.question_ids[q], depth=depth)
        assert list(cells.columns) == ["question_id", "depth", "turn", "position", "layer", "overlap"]
        assert set(cells["question_id"]) == {truth.question_ids[q]} and set(cells["depth"]) == {depth}
        assert set(cells["turn"]) == {0}
        # the smallest depth's last iteration (1) against depth's last iteration (depth): the planted overlap
        expected = truth.overlap(1, depth)[q, cells["position"].to_numpy(), cells["layer"].to_numpy()]
        np.testing.assert_allclose(cells["overlap"].to_numpy(), expected, rtol=0, atol=1e-12)  # 1 - m/k, to rounding
        assert (expected < 0.9).any()  # the question has planted shifts to show
        assert sorted(set(cells["position"])) == list(range(10)) and sorted(set(cells["layer"])) == list(range(18))


def test_the_default_heatmap_carries_its_question_and_equals_asking_for_it(planted):
    path, truth = planted
    a = study.open(path)
    default = a.data("fig:overlap_heatmap")
    assert list(default.columns) == ["question_id", "depth", "turn", "position", "layer", "overlap"]
    (question,) = set(default["question_id"])
    assert set(default["depth"]) == {4} and default["position"].max() >= 10  # sketch positions included
    asked = a.data("fig_overlap_heatmap", question=question, depth=4)
    pd.testing.assert_frame_equal(asked, default)


def test_figures_with_a_question_column_are_cut_to_the_question(planted):
    path, truth = planted
    a = study.open(path)
    q = truth.question_ids[3]
    traces = a.data("fig:convergence_monitoring", question=q)
    assert len(traces) > 0 and set(traces["question_id"]) == {q}
    everything = a.data("fig:convergence_monitoring")
    assert len(traces) == (everything["question_id"] == q).sum()


def test_asking_a_figure_for_what_it_does_not_have_is_not_available(planted):
    path, truth = planted
    a = study.open(path)
    with pytest.raises(analyses.NotAvailable, match="depth 1 is the smallest"):
        a.data("fig:overlap_heatmap", question=truth.question_ids[0], depth=1)
    with pytest.raises(analyses.NotAvailable, match="depth 9 is not in the run"):
        a.data("fig:overlap_heatmap", question=truth.question_ids[0], depth=9)
    with pytest.raises(analyses.NotAvailable, match="'nope' is not recorded"):
        a.data("fig:overlap_heatmap_zoom", question="nope")
    with pytest.raises(analyses.NotAvailable, match="not drawn per question"):
        a.data("tab:gmm", question=truth.question_ids[0])
    with pytest.raises(analyses.NotAvailable, match="pass question="):
        a.data("fig:overlap_heatmap", depth=3)


def test_help_of_open_shows_the_real_signature_and_options():
    parameters = inspect.signature(study.open).parameters
    assert list(parameters) == ["run", "baseline", "baseline_depth", "name", "alpha", "probe", "dictionary"]
    assert list(inspect.signature(study.open_run).parameters) == list(parameters)
    for option in parameters:
        assert f"{option}:" in study.open.__doc__ and f"{option}:" in study.open_run.__doc__
