"""GMM threshold, classification, summary statistics, layer profiles and heatmaps recover the planted basins."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from sklearn.mixture import GaussianMixture

from sst_interp.kernels.results import NotApplicable
from sst_interp.analyses.basin_profiles import (
    HeatmapData,
    LayerProfile,
    PunctuatedEquilibrium,
    layer_profile,
    overlap_heatmap,
    punctuated_equilibrium,
)
from sst_interp.analyses.basins import (
    GMMFit,
    _crossover,
    basin_summary,
    classify_positions,
    fit_gmm,
    gmm_robustness,
    position0_universality,
)
from sst_interp.analyses.overlap import OverlapResult, cross_run_overlap
from sst_interp.kernels.errors import UsageError
from sst_interp.store import Run
from sst_interp.synthetic import SyntheticSpec, write_synthetic_run

WINDOW = 8


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    spec = SyntheticSpec(n_questions=14, full_positions=WINDOW, sketch_positions=6, num_layers=6, hidden_size=512,
                         batch_questions=14, seed=5)
    path = tmp_path_factory.mktemp("basins") / "run"
    truth = write_synthetic_run(path, spec)
    run = Run.open(path)
    return truth, run, punctuated_equilibrium(run)


def paper_mixture() -> GaussianMixture:
    """A GaussianMixture holding the paper's reported components (app:gmm)."""
    gmm = GaussianMixture(n_components=2)
    stds = np.array([0.004, 0.092])
    gmm.means_ = np.array([[0.990], [0.869]])
    gmm.covariances_ = (stds ** 2).reshape(2, 1, 1)
    gmm.precisions_cholesky_ = (1 / stds).reshape(2, 1, 1)
    gmm.weights_ = np.array([0.862, 0.138])
    return gmm


def test_crossover_of_the_papers_components_is_its_threshold():
    assert _crossover(paper_mixture(), 0.3) == pytest.approx(0.976, abs=1e-3)


def test_gmm_recovers_a_two_regime_mixture():
    rng = np.random.default_rng(1)
    n = 6000
    stable = rng.normal(0.990, 0.004, int(0.862 * n))
    low = np.clip(rng.normal(0.869, 0.092, n - stable.size), 0.3, 1.0)
    fit = fit_gmm(np.concatenate([stable, low]))
    assert isinstance(fit, GMMFit) and fit.converged
    assert fit.means[0] == pytest.approx(0.990, abs=0.002) and fit.stds[0] == pytest.approx(0.004, abs=0.001)
    assert fit.weights[0] == pytest.approx(0.862, abs=0.02)
    assert fit.threshold == pytest.approx(0.976, abs=0.003)
    table = fit.table()
    assert table["component"].tolist() == ["Stable", "Low-overlap"] and table.attrs["threshold"] == fit.threshold
    robust = gmm_robustness(rng.permutation(np.concatenate([stable, low]))[:2000], components=(2, 3, 5))
    assert robust.table()["components"].tolist() == [2, 3, 5]
    assert robust.table()["shift"].iloc[0] == 0.0
    assert robust.max_shift < 0.003  # the paper: "varies by less than 0.003 across the 2-5 component fits"


def test_gmm_degenerate_inputs():
    assert isinstance(fit_gmm(np.ones(100)), NotApplicable)
    assert isinstance(gmm_robustness(np.ones(50)), NotApplicable)
    with pytest.raises(UsageError):
        fit_gmm(np.linspace(0, 1, 10), n_components=1)


def test_classify_positions_rules_hand_case():
    values = np.array([[[1.0, 0.9, 1.0], [0.99, 0.99, 0.99], [np.nan, np.nan, np.nan]]])  # [1, 3, 3]
    assert classify_positions(values, 0.95, "any").tolist() == [[True, False, False]]
    assert classify_positions(values, 0.97, "mean").tolist() == [[True, False, False]]
    assert classify_positions(values, 0.97, "median").tolist() == [[False, False, False]]
    with pytest.raises(UsageError):
        classify_positions(values, 0.9, "max")


def test_threshold_separates_and_classification_recovers_planted_positions(planted):
    truth, _, pe = planted
    assert isinstance(pe, PunctuatedEquilibrium)
    ov = truth.overlap(1, 4)[:, :WINDOW]
    basin = truth.basin[:, :WINDOW]
    stable_min = ov[~basin].min()
    assert ov[basin].min(axis=-1).max() < pe.gmm.threshold <= stable_min
    np.testing.assert_array_equal(pe.summary.low, basin)
    assert pe.robustness.max_shift < 0.01


def test_summary_statistics_equal_the_planted_counts(planted):
    truth, _, pe = planted
    basin = truth.basin[:, :WINDOW]
    s = pe.summary
    np.testing.assert_array_equal(s.counts, basin.sum(axis=1))
    np.testing.assert_allclose(s.rates, basin.mean(axis=0))
    gaps = np.concatenate([np.diff(np.flatnonzero(row)) for row in basin])
    np.testing.assert_array_equal(np.sort(s.gaps), np.sort(gaps))
    assert s.gap_cv == pytest.approx(stats.variation(gaps))
    assert s.pos0_rate == 1.0
    rows = dict(zip(s.table()["metric"], s.table()["value"]))
    assert rows["low-overlap positions per question: median"] == np.median(basin.sum(axis=1))
    assert s.position_table()["n_low"].tolist() == basin.sum(axis=0).tolist()


def test_position0_universality_is_the_iteration_1_vs_2_mean(planted):
    truth, _, pe = planted
    per_q = truth.overlap(1, 2)[:, 0].mean(axis=1)
    assert pe.pos0.n_questions == 14 and pe.pos0.n_low == 14
    assert pe.pos0.mean == pytest.approx(per_q.mean()) and pe.pos0.std == pytest.approx(per_q.std(ddof=1))


def test_layer_profiles_are_percentiles_of_the_planted_traces(planted):
    truth, _, pe = planted
    ov = truth.overlap(1, 4)[:, :WINDOW]
    firsts = [min((d for d in row if d >= 0), default=10 ** 9) for row in truth.divergence]
    pre = np.arange(WINDOW)[None, :] <= np.array(firsts)[:, None]
    profile = pe.profiles["low-overlap"]
    assert isinstance(profile, LayerProfile)
    selected = truth.basin[:, :WINDOW] & pre
    assert profile.n == int(selected.sum())
    traces = ov[selected]  # [N, L], same row-major order
    table = profile.table()
    np.testing.assert_allclose(table["median"], np.median(traces, axis=0))
    np.testing.assert_allclose(table["p25"], np.percentile(traces, 25, axis=0))
    np.testing.assert_allclose(table["p95"], np.percentile(traces, 95, axis=0))
    zero_weight = table["layer"] == 0  # the paper profile does not shift at the first layer
    assert (table.loc[zero_weight, "p5"] == 1.0).all() and (table["median"].iloc[1:] < 0.99).all()
    pos0 = pe.profiles["position 0"]
    assert pos0.n == 14 and pos0.banded
    np.testing.assert_allclose(pos0.table()["median"], np.median(ov[:, 0], axis=0))
    assert (pe.profiles["stable"].table()["p5"] == 1.0).all()
    assert pe.profiles["late"].name == f"positions {WINDOW - 3}-{WINDOW - 1}"


def test_heatmaps_and_long_range_profile(planted):
    truth, run, pe = planted
    heat = pe.heatmap
    assert isinstance(heat, HeatmapData) and heat.values.shape == (6, WINDOW + 6)
    counts = truth.basin.sum(axis=1)
    median = np.median(counts)
    expected = min(range(14), key=lambda i: (abs(counts[i] - median), i))
    assert heat.question_id == truth.question_ids[expected]
    np.testing.assert_allclose(heat.values, truth.overlap(1, 4)[expected].T)
    assert list(heat.low_positions) == np.flatnonzero(truth.basin[expected]).tolist()
    zoom = pe.heatmap_zoom
    assert zoom.figure == "fig:overlap_heatmap_zoom" and zoom.question_id != heat.question_id
    window_counts = truth.basin[:, :WINDOW].sum(axis=1)
    assert window_counts[truth.question_ids.index(zoom.question_id)] == max(
        c for i, c in enumerate(window_counts) if truth.question_ids[i] != heat.question_id)
    assert pe.long_range_profile.n == int(truth.basin.sum())
    assert len(heat.table()) == 6 * (WINDOW + 6)


def test_not_applicable_cases(planted, tmp_path):
    truth, run, pe = planted
    overlap = pe.overlap
    assert isinstance(basin_summary(overlap, threshold=0.0), NotApplicable)
    assert isinstance(layer_profile(overlap, np.zeros((14, WINDOW), bool), "nothing"), NotApplicable)
    assert isinstance(position0_universality(overlap.restrict(positions=[3]), 0.9), NotApplicable)
    assert isinstance(overlap_heatmap(overlap, 0.9, question_id="nope"), NotApplicable)
    write_synthetic_run(tmp_path / "one", SyntheticSpec(n_questions=2, depths=(1,), full_positions=2, num_layers=2,
                                                        hidden_size=128))
    single = punctuated_equilibrium(Run.open(tmp_path / "one"))
    assert isinstance(single, NotApplicable) and "single depth" in single.reason
    flat = OverlapResult("cross-run", "x", 4, 16, ("a", "b"), np.arange(2), np.arange(2), np.ones((2, 2, 2)), 2)
    assert isinstance(fit_gmm(flat.values), NotApplicable)
    assert isinstance(cross_run_overlap(run, question_ids=["missing"]), NotApplicable)
