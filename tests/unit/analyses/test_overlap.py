"""Top-k overlap: hand-computed cases, agreement with a plain set loop, and exact recovery of the planted overlaps."""

from __future__ import annotations

import numpy as np
import pytest

from sst_interp.analyses.layers import scaled_top_k
from sst_interp.kernels.results import NotApplicable
from sst_interp.analyses.overlap import (
    OverlapResult,
    cross_run_overlap,
    overlap_from_indices,
    topk_indices,
    topk_overlap,
    within_block_overlap,
    within_run_overlap,
)
from sst_interp.kernels.errors import UsageError
from sst_interp.store import Run
from sst_interp.synthetic import SyntheticSpec, write_synthetic_run


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    spec = SyntheticSpec(n_questions=5, full_positions=5, sketch_positions=3, num_layers=4, hidden_size=256,
                         batch_questions=5, seed=3)
    path = tmp_path_factory.mktemp("ov") / "run"
    truth = write_synthetic_run(path, spec)
    return truth, Run.open(path)


def test_topk_indices_hand_cases():
    v = np.array([3.0, -5.0, 1.0, 0.5, -2.0])
    assert topk_indices(v, 2).tolist() == [0, 1]
    assert topk_indices(v, 3).tolist() == [0, 1, 4]
    assert topk_indices(v, 5).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(UsageError):
        topk_indices(v, 6)


def test_topk_overlap_hand_case_ignores_sign_and_magnitude():
    u = np.array([5.0, 4.0, 3.0, 0.0, 0.0, 0.0])
    v = np.array([0.0, -40.0, 0.3, 5.0, 0.0, 0.1])
    assert topk_overlap(u, v, 3) == pytest.approx(2 / 3)  # {0,1,2} vs {1,2,3}
    assert topk_overlap(u, u, 3) == 1.0
    assert topk_overlap(u, -u, 3) == 1.0


def test_vectorised_overlap_equals_a_set_loop():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 3, 50))
    b = a + 0.8 * rng.standard_normal((4, 3, 50))
    k = 12
    got = topk_overlap(a, b, k)
    for i in range(4):
        for j in range(3):
            sa = set(np.argsort(-np.abs(a[i, j]))[:k].tolist())
            sb = set(np.argsort(-np.abs(b[i, j]))[:k].tolist())
            assert got[i, j] == pytest.approx(len(sa & sb) / k)
    assert np.allclose(overlap_from_indices(topk_indices(a, k), topk_indices(b, k), 50), got)
    values = np.stack([a, b], axis=1)  # [P=4, I=2, L=3, d]
    np.testing.assert_allclose(within_block_overlap(values, 1, 2, k), got)


def test_scaled_k_is_the_paper_k():
    assert scaled_top_k(5376) == 1024
    assert scaled_top_k(256) == round(256 * 1024 / 5376)


def test_cross_run_recovers_planted_overlap_exactly(planted):
    truth, run = planted
    res = cross_run_overlap(run)
    assert isinstance(res, OverlapResult)
    assert res.k == truth.k and res.comparison == "depth 1 iter 1 vs depth 4 iter 4"
    assert res.positions.tolist() == list(range(5))
    np.testing.assert_allclose(res.values, truth.overlap(1, 4)[:, :5], atol=1e-12)
    both = cross_run_overlap(run, source="both")
    assert both.positions.tolist() == list(range(8))
    np.testing.assert_allclose(both.values, truth.overlap(1, 4), atol=1e-12)
    sketch = cross_run_overlap(run, 2, 3, source="sketch")
    np.testing.assert_allclose(sketch.values, truth.overlap(2, 3)[:, 5:], atol=1e-12)
    table = res.table()
    assert len(table) == 5 * 5 * 4 and set(table.columns) == {"question_id", "position", "layer", "overlap"}


def test_within_run_recovers_planted_overlap_exactly(planted):
    truth, run = planted
    res = within_run_overlap(run, depth=3, iteration_a=1, iteration_b=2, source="both")
    np.testing.assert_allclose(res.values, truth.overlap(1, 2), atol=1e-12)
    only0 = within_run_overlap(run, depth=4, positions=[0])
    assert only0.positions.tolist() == [0]
    np.testing.assert_allclose(only0.values[:, 0], truth.overlap(1, 4)[:, 0], atol=1e-12)
    sub = res.restrict(positions=[1, 2], question_ids=["syn0001"])
    assert sub.values.shape == (1, 2, 4)


def test_degenerate_and_bad_requests(planted, tmp_path):
    truth, run = planted
    assert isinstance(within_run_overlap(run, depth=1), NotApplicable)
    with pytest.raises(UsageError):
        cross_run_overlap(run, k=truth.k + 1, source="sketch")  # sketches only hold top-k sets
    with pytest.raises(UsageError):
        cross_run_overlap(run, 1, 5)
    write_synthetic_run(tmp_path / "one", SyntheticSpec(n_questions=2, depths=(1,), full_positions=2,
                                                        num_layers=2, hidden_size=128))
    single = cross_run_overlap(Run.open(tmp_path / "one"))
    assert isinstance(single, NotApplicable) and "single depth" in single.reason
    assert single.table().columns.tolist() == ["measurement", "not_applicable"]


def test_an_unrecorded_sketch_cell_has_no_overlap():
    """The reader fills a sketch cell that has no row with -1; such a set is NaN, never an overlap at index d-1."""
    d = 6
    a = np.array([[0, 1, 5], [-1, -1, -1], [2, 3, 4]])
    b = np.array([[0, 1, 5], [5, 0, 1], [-1, -1, -1]])
    got = overlap_from_indices(a, b, d)
    assert got[0] == 1.0 and np.isnan(got[1]) and np.isnan(got[2])
