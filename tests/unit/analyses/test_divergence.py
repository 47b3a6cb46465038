"""First divergence, pre-divergence positions, tab:causal_ordering and tab:pos0_divergence."""

from __future__ import annotations

import numpy as np
import pytest

from sst_interp.analyses.basins import classify_positions
from sst_interp.analyses.divergence import (
    CausalOrdering,
    DivergenceResult,
    causal_ordering,
    divergence,
    first_divergence_any,
    first_true,
    pos0_divergence,
    pre_divergence_mask,
)
from sst_interp.kernels.results import NotApplicable
from sst_interp.kernels.outcomes import first_divergence
from sst_interp.store import Run
from sst_interp.synthetic import SyntheticSpec, write_synthetic_run

WINDOW = 6


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    spec = SyntheticSpec(n_questions=16, full_positions=WINDOW, num_layers=3, hidden_size=128, n_exceptions=2,
                         batch_questions=16, seed=11, extra_tokens=8)
    path = tmp_path_factory.mktemp("div") / "run"
    truth = write_synthetic_run(path, spec)
    return truth, Run.open(path)


def test_first_divergence_hand_cases():
    assert first_divergence([1, 2, 3], [1, 2, 3]) == -1
    assert first_divergence([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    assert first_divergence([], [5]) == 0
    assert first_divergence_any([[1, 2, 3, 4], [1, 2, 3, 5], [1, 7, 3, 4]]) == 1
    assert first_divergence_any([[1, 2], [1, 2]]) == -1


def test_pre_divergence_includes_the_divergent_position():
    mask = pre_divergence_mask(np.array([0, 2, -1]), np.arange(4))
    assert mask.tolist() == [[True, False, False, False], [True, True, True, False], [True] * 4]
    assert first_true(np.array([[0, 1, 1], [0, 0, 0]], bool), np.array([3, 4, 5])).tolist() == [4, -1]


def test_causal_ordering_hand_cases():
    first_low = np.array([0, 0, 0, 3, -1, -1, 2])
    first_div = np.array([0, 4, -1, 1, 2, -1, 8])
    res = causal_ordering(first_low, first_div, window=6)
    assert isinstance(res, CausalOrdering)
    assert res.group.tolist() == ["simultaneous", "precedes", "beyond window", "exception", "exception", "neither",
                                  "beyond window"]
    table = res.table()
    assert table["n"].tolist() == [1, 1, 2, 2, 1]
    assert table["percent"].sum() == pytest.approx(100.0)
    assert res.late_confirmed == 1  # question 6 diverges at 8 (later, not never); question 2 never
    assert table.attrs["exceptions"] == "2/7"


def test_pos0_divergence_hand_case_and_degenerate():
    low0 = np.array([True, True, True, True, False])
    div = np.array([0, 3, 12, -1, 0])
    res = pos0_divergence(low0, div, window=10)
    assert (res.n_pos0_shift, res.at_0, res.in_window, res.beyond_window, res.late_confirmed) == (4, 1, 1, 2, 1)
    assert res.table()["n"].tolist() == [1, 1, 2]
    assert isinstance(pos0_divergence(np.zeros(3, bool), np.zeros(3, int), 10), NotApplicable)


def test_divergence_recovers_planted_first_divergence(planted):
    truth, run = planted
    res = divergence(run)
    assert isinstance(res, DivergenceResult)
    assert res.window == WINDOW and res.depths == (1, 2, 3, 4)
    np.testing.assert_array_equal(res.pair(1, 2), truth.divergence[:, 1])
    np.testing.assert_array_equal(res.pair(1, 4), truth.divergence[:, 3])
    for q in range(len(truth.question_ids)):
        assert res.pair(2, 3)[q] == (truth.first_divergence(q, 2, 3) if truth.first_divergence(q, 2, 3) is not None
                                     else -1)
        planted_first = [d for d in truth.divergence[q] if d >= 0]
        assert res.first_any[q] == (min(planted_first) if planted_first else -1)
    counts = res.pre_divergence().sum(axis=1)
    expected = [WINDOW if f < 0 else min(f + 1, WINDOW) for f in res.first_any]
    assert counts.tolist() == expected
    assert len(res.table()) == 16


def test_causal_ordering_on_the_planted_run_finds_the_planted_exceptions(planted):
    truth, run = planted
    div = divergence(run)
    low = truth.overlap(1, 4)[:, :WINDOW] < 0.99  # planted: every basin cell is far below, stable cells are 1.0
    np.testing.assert_array_equal(classify_positions(truth.overlap(1, 4)[:, :WINDOW], 0.99), truth.basin[:, :WINDOW])
    res = causal_ordering(first_true(low.any(axis=2), np.arange(WINDOW)), div.first_any, WINDOW, div.question_ids)
    assert res.count("exception") == 2
    assert res.group[:2].tolist() == ["exception", "exception"]
    at0 = int((div.first_any[2:] == 0).sum())
    assert res.count("simultaneous") == at0  # position 0 is universal elsewhere, so coinciding = diverging at 0
    in_window = int(((div.first_any[2:] > 0) & (div.first_any[2:] < WINDOW)).sum())
    assert res.count("precedes") == in_window
    assert res.count("beyond window") == 16 - 2 - at0 - in_window


def test_single_depth_is_not_applicable(tmp_path):
    write_synthetic_run(tmp_path / "one", SyntheticSpec(n_questions=2, depths=(2,), full_positions=2, num_layers=2,
                                                        hidden_size=128))
    res = divergence(Run.open(tmp_path / "one"))
    assert isinstance(res, NotApplicable) and "single depth" in res.reason
