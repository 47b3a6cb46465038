"""Alpha figure data recovers planted structure in [L, d] blend-coefficient arrays."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sst_interp.analyses import alpha as al
from sst_interp.kernels.results import NotApplicable
from sst_interp.kernels.errors import UsageError


def test_alpha_parameterisation():
    assert al.alpha_init() == pytest.approx(0.015 + 0.085 / (1 + np.exp(1.8)))
    assert round(al.alpha_init(), 3) == 0.027  # paper: "approximately 0.027"
    out = al.alpha_from_theta(np.array([[0.0, -50.0, 50.0]]))
    assert out == pytest.approx(np.array([[0.0575, 0.015, 0.10]]))


def test_quantile_ribbon_linear_layers():
    d = 1001
    alpha = np.stack([np.linspace(0.02 + 0.001 * l, 0.03 + 0.002 * l, d) for l in range(4)])
    frame = al.quantile_ribbon(alpha).table()
    lo, hi = 0.02 + 0.001 * np.arange(4), 0.03 + 0.002 * np.arange(4)
    assert frame["p50"].to_numpy() == pytest.approx((lo + hi) / 2)
    assert frame["p5"].to_numpy() == pytest.approx(lo + 0.05 * (hi - lo))
    assert frame["mean"].to_numpy() == pytest.approx((lo + hi) / 2)


def test_pca_recovers_planted_circle():
    n_layers, d = 16, 5376
    rng = np.random.default_rng(0)
    u, v = np.linalg.qr(rng.normal(size=(d, 2)))[0].T
    t = 2 * np.pi * np.arange(n_layers) / n_layers
    dev = 0.004 * (np.cos(t)[:, None] * u + 0.5 * np.sin(t)[:, None] * v)
    res = al.alpha_pca(al.alpha_init() + dev)
    assert res.explained_variance_ratio[:2] == pytest.approx([0.8, 0.2], abs=1e-9)
    assert res.explained_variance_ratio[2] == pytest.approx(0.0, abs=1e-9)
    assert res.adjacent_ratio < 0.5  # neighbours are close: a smooth depth-ordered path
    shuffled = al.alpha_pca(al.alpha_init() + dev[rng.permutation(n_layers)])
    assert shuffled.adjacent_ratio > res.adjacent_ratio
    assert list(res.table().columns) == ["layer", "pc1", "pc2", "pc3"]


def test_pca_degenerate():
    assert isinstance(al.alpha_pca(np.full((5, 10), al.alpha_init())), NotApplicable)
    assert isinstance(al.alpha_pca(np.ones((2, 10)) * 0.03), NotApplicable)


def test_panels_grid_and_selected_layers():
    assert al.panel_grid_shape(5376) == (64, 84)
    assert al.panel_grid_shape(640) == (20, 32)
    alpha = al.alpha_init() + 1e-4 * np.arange(8 * 640, dtype=float).reshape(8, 640)
    res = al.alpha_panels(alpha)
    assert res.layers == (0, 3, 5, 7)  # paper's 0, 30, 40, 61 at 8 layers
    assert res.raw.shape == (4, 20, 32)
    assert res.raw[1, 2, 5] == alpha[3, 2 * 32 + 5]
    assert res.deviation[0, 0, 0] == pytest.approx(0.0)
    assert res.raw_range == pytest.approx(tuple(np.percentile(alpha, [1, 99])))
    with pytest.raises(UsageError):
        al.alpha_panels(alpha, layers=[9])


def test_specialisation_profile_planted_magnitudes():
    d = 400
    signs = np.where(np.arange(d) % 2 == 0, 1.0, -1.0)
    mags = np.array([0.0, 0.001, 0.003, 0.002])  # non-monotonic with depth
    alpha = al.alpha_init() + mags[:, None] * signs[None, :]
    frame = al.specialisation_profile(alpha).table()
    assert frame["p50"].to_numpy() == pytest.approx(mags, abs=1e-12)
    assert int(frame["p50"].idxmax()) == 2


def test_global_stats_pool_layers_exactly():
    rng = np.random.default_rng(1)
    rows, pooled = [], {}
    for step in (0, 10):
        layers = [rng.normal(0.027, 0.001 * (step + 1), size=50) for _ in range(3)]
        for layer, x in enumerate(layers):
            rows.append({"step": step, "layer": layer, "mean": x.mean(), "std": x.std(), "min": x.min(), "max": x.max()})
        pooled[step] = np.concatenate(layers)
    frame = al.global_stats_over_training(pd.DataFrame(rows)).table().set_index("step")
    for step, x in pooled.items():
        assert frame.loc[step, "mean"] == pytest.approx(x.mean())
        assert frame.loc[step, "std"] == pytest.approx(x.std())
        assert frame.loc[step, "min"] == x.min() and frame.loc[step, "max"] == x.max()
    assert isinstance(al.global_stats_over_training(pd.DataFrame(columns=["step", "layer", "mean"])), NotApplicable)
    with pytest.raises(UsageError):
        al.global_stats_over_training(pd.DataFrame({"step": [0]}))


def test_bad_alpha_shape():
    with pytest.raises(UsageError):
        al.quantile_ribbon(np.zeros(5))
