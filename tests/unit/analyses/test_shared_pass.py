"""One read per shard: punctuated_equilibrium collects its three overlaps in one pass and notes the L2 deltas that
convergence_monitoring then uses; every number is the one the separate, unshared computations give."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sst_interp.analyses import hidden_pass
from sst_interp.analyses.basin_profiles import layer_profile, punctuated_equilibrium
from sst_interp.analyses.basins import classify_positions, position0_universality
from sst_interp.analyses.convergence import convergence_monitoring
from sst_interp.analyses.overlap import (
    _collect_many,
    _cross_plan,
    _distinct_overlap,
    _Failed,
    cross_run_overlap,
    overlap_from_indices,
    topk_indices,
    within_run_overlap,
)
from sst_interp.kernels.errors import UsageError
from sst_interp.store import Run
from sst_interp.synthetic import SyntheticSpec, write_synthetic_run


@pytest.fixture(scope="module", params=["bfloat16", "float32"])
def run_path(request, tmp_path_factory):
    spec = SyntheticSpec(n_questions=10, full_positions=6, sketch_positions=5, num_layers=5, hidden_size=256,
                         batch_questions=5, dtype=request.param, seed=11)
    path = tmp_path_factory.mktemp("shared") / "run"
    write_synthetic_run(path, spec)
    return path


def test_distinct_overlap_counts_as_the_membership_masks():
    rng = np.random.default_rng(0)
    for shape, d, k in [((3, 4), 64, 7), ((2,), 16, 16), ((5, 2), 40, 1), ((1, 1), 1, 1)]:
        a = topk_indices(rng.normal(size=shape + (d,)), k, sort=False)
        b = topk_indices(rng.normal(size=shape + (d,)), k, sort=False)
        assert np.array_equal(_distinct_overlap(a, b, d), overlap_from_indices(a, b, d))
        assert np.array_equal(_distinct_overlap(a, a, d), np.ones(shape))


def test_one_pass_gives_the_separate_overlaps(run_path):
    pe = punctuated_equilibrium(Run.open(run_path))
    alone = cross_run_overlap(Run.open(run_path))
    assert np.array_equal(pe.overlap.values, alone.values, equal_nan=True)
    t = pe.gmm.threshold
    pos0 = cross_run_overlap(Run.open(run_path), 1, 2, positions=[0])
    expected = position0_universality(pos0, t)
    assert np.array_equal(pe.pos0.per_question, expected.per_question)
    assert (pe.pos0.n_questions, pe.pos0.n_low, pe.pos0.mean, pe.pos0.std) == \
        (expected.n_questions, expected.n_low, expected.mean, expected.std)
    long_ov = cross_run_overlap(Run.open(run_path), k=int(Run.open(run_path).manifest["sketch_k"]), source="both")
    profile = layer_profile(long_ov, classify_positions(long_ov.values, t), "long range")
    assert np.array_equal(pe.long_range_profile.traces, profile.traces, equal_nan=True)
    assert pe.long_range_profile.keys == profile.keys


def test_within_run_position0_shares_the_full_read(run_path):
    run = Run.open(run_path)
    full, only0 = _collect_many(run, [_cross_plan(run, 4, 4, 1, 2), _cross_plan(run, 4, 4, 1, 2, positions=[0])])
    alone = within_run_overlap(Run.open(run_path), 4, 1, 2, positions=[0])
    assert np.array_equal(only0.values, alone.values) and only0.positions.tolist() == [0]
    assert np.array_equal(full.values[:, :1], alone.values)


def test_convergence_uses_the_noted_deltas_and_gets_the_same_numbers(run_path):
    shared = Run.open(run_path)
    punctuated_equilibrium(shared)
    noted = hidden_pass.noted_l2_deltas(shared, 4, 0, shared.num_layers - 1)
    assert sorted(noted) == sorted(shared.question_ids(4))
    a = convergence_monitoring(shared)
    b = convergence_monitoring(Run.open(run_path))  # nothing noted: reads the shards
    assert np.array_equal(a.deltas, b.deltas, equal_nan=True) and np.array_equal(a.positions, b.positions)
    pd.testing.assert_frame_equal(a.points, b.points)
    pd.testing.assert_frame_equal(a.kruskal, b.kruskal)
    assert (a.mann_whitney_p, a.mann_whitney_u, a.auroc_degrade) == (b.mann_whitney_p, b.mann_whitney_u,
                                                                      b.auroc_degrade)
    other_layer = convergence_monitoring(shared, layer=0)  # not noted: read, not taken from the notes
    assert np.array_equal(other_layer.deltas, convergence_monitoring(Run.open(run_path), layer=0).deltas,
                          equal_nan=True)


class _HiddenOnly:
    """A stand-in run that has ``hidden`` but not ``hidden_raw`` (and cannot be weakly referenced)."""

    __slots__ = ("_run",)

    def __init__(self, run: Run) -> None:
        self._run = run

    def __getattr__(self, name):
        if name == "hidden_raw":
            raise AttributeError(name)
        return getattr(self._run, name)


def test_a_stand_in_with_only_hidden_gives_the_same_overlap(run_path):
    expected = cross_run_overlap(Run.open(run_path))
    got = cross_run_overlap(_HiddenOnly(Run.open(run_path)))
    assert np.array_equal(got.values, expected.values, equal_nan=True)


def test_a_failing_comparison_fails_alone_and_later(run_path):
    run = Run.open(run_path)
    with pytest.raises(UsageError, match="no iteration 9"):
        cross_run_overlap(run, iteration_b=9)
    good, bad = _collect_many(run, [_cross_plan(run), _cross_plan(run, iteration_b=9)])
    assert isinstance(bad, _Failed) and isinstance(bad.error, UsageError)
    assert np.array_equal(good.values, cross_run_overlap(Run.open(run_path)).values, equal_nan=True)
