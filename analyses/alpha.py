"""Learned blend coefficients (sec:learned_alpha, app:alpha_analysis): data for the alpha figures.

``alpha_l = a_min + (a_max - a_min) * sigmoid(theta_l)`` (:func:`sst_interp.kernels.paper.alpha_from_theta`, with the
paper's constants), so every coefficient starts at ``alpha_init`` ~= 0.0271. Deviations are
always measured from this fixed ``alpha_init`` (not from a data-derived mean), as the paper does.

Inputs are ``alpha: [L, d]`` arrays (use :func:`alpha_from_theta` on a checkpoint's theta) and, for
the training figure, a training log with one row per (step, layer) and columns ``step``, ``layer``,
``mean`` and optionally ``std``, ``min``, ``max``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sst_interp.analyses.layers import paper_layer
from sst_interp.kernels.results import AnalysisResult, NotApplicable
from sst_interp.kernels.errors import UsageError
# eq:alpha is defined in sst_interp.kernels.paper; imported here so that ``alpha.alpha_from_theta`` and
# ``alpha.alpha_init`` read naturally next to the analyses that use them.
from sst_interp.kernels.paper import alpha_from_theta, alpha_init

PAPER_SELECTED_LAYERS = (0, 30, 40, 61)  # fig:alpha_panels_*_selected (62-layer numbering)


def _check_alpha(alpha: np.ndarray) -> np.ndarray:
    arr = np.asarray(alpha, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise UsageError(f"alpha must be a [layers, d] array, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise UsageError("alpha contains NaN or inf; check the checkpoint's theta")
    return arr


def _percentile_frame(values: np.ndarray, percentiles: Sequence[float], prefix: str = "p") -> pd.DataFrame:
    q = np.percentile(values, percentiles, axis=1)  # [len(percentiles), L]
    frame = pd.DataFrame({"layer": np.arange(values.shape[0])})
    for p, row in zip(percentiles, q):
        frame[f"{prefix}{p:g}"] = row
    return frame


@dataclass(frozen=True)
class AlphaQuantiles(AnalysisResult):
    """fig:alpha_quantile_ribbon: within-layer percentiles of alpha.

    Args:
        frame: one row per layer: layer, mean, p5, p25, p50, p75, p95.
        alpha_init: the initial value (drawn as a reference line).
    """

    label = "fig:alpha_quantile_ribbon"
    frame: pd.DataFrame
    alpha_init: float

    def table(self) -> pd.DataFrame:
        """The per-layer percentile frame."""
        return self.frame


def quantile_ribbon(alpha: np.ndarray, percentiles: Sequence[float] = (5, 25, 50, 75, 95)) -> AlphaQuantiles:
    """Within-layer percentile bands of ``alpha: [L, d]`` (p5-p95 outer, p25-p75 inner, median)."""
    arr = _check_alpha(alpha)
    frame = _percentile_frame(arr, percentiles)
    frame.insert(1, "mean", arr.mean(axis=1))
    return AlphaQuantiles(frame, alpha_init())


@dataclass(frozen=True)
class AlphaPCA(AnalysisResult):
    """fig:alpha_pca_trajectory: per-layer deviation vectors projected on their top principal components.

    Args:
        coords: ``[L, n_components]`` projections of ``alpha_l - alpha_init``.
        explained_variance_ratio: ``[n_components]`` fraction of layer-to-layer variance per component.
        adjacent_ratio: mean distance between adjacent layers divided by the mean distance between
            all layer pairs in the projected space (well below 1 for a smooth depth-ordered path).
    """

    label = "fig:alpha_pca_trajectory"
    coords: np.ndarray
    explained_variance_ratio: np.ndarray
    adjacent_ratio: float

    def table(self) -> pd.DataFrame:
        """One row per layer: layer, pc1, pc2, ..."""
        frame = pd.DataFrame(self.coords, columns=[f"pc{i + 1}" for i in range(self.coords.shape[1])])
        frame.insert(0, "layer", np.arange(len(frame)))
        return frame


def alpha_pca(alpha: np.ndarray, n_components: int = 3, init: float | None = None) -> AlphaPCA | NotApplicable:
    """PCA (sklearn) of the deviation matrix ``D = alpha - alpha_init`` over layers (rows of ``[L, d]``)."""
    arr = _check_alpha(alpha)
    if arr.shape[0] < 3:
        return NotApplicable(f"alpha has {arr.shape[0]} layer(s); a trajectory needs at least 3", AlphaPCA.label)
    dev = arr - (alpha_init() if init is None else init)
    if np.allclose(dev, dev[0]):
        return NotApplicable("every layer has the same alpha vector; there is no layer-to-layer variance",
                             AlphaPCA.label)
    k = min(n_components, arr.shape[0] - 1, arr.shape[1])
    from sklearn.decomposition import PCA

    pca = PCA(n_components=k, svd_solver="full")
    coords = pca.fit_transform(dev)
    dist = np.linalg.norm(coords[:, None, :] - coords[None, :, :], axis=-1)
    adjacent = float(np.mean(np.diag(dist, k=1)))
    all_pairs = float(dist[np.triu_indices(len(coords), k=1)].mean())
    return AlphaPCA(coords, pca.explained_variance_ratio_.copy(), adjacent / all_pairs)


def panel_grid_shape(d: int) -> tuple[int, int]:
    """Rows x columns for reshaping a ``d``-vector: the factor pair closest to square (5376 -> 64 x 84)."""
    if d < 1:
        raise UsageError(f"d must be positive, got {d}")
    rows = int(np.floor(np.sqrt(d)))
    while d % rows:
        rows -= 1
    return rows, d // rows


@dataclass(frozen=True)
class AlphaPanels(AnalysisResult):
    """fig:alpha_panels_raw_* and fig:alpha_panels_deviation_*: per-layer grids and shared colour scales.

    Args:
        layers: the layers drawn.
        raw: ``[len(layers), rows, cols]`` raw alpha grids (dimension ``i`` at ``divmod(i, cols)``).
        deviation: same shape, ``alpha - alpha_init``.
        raw_range: shared raw colour scale, p1-p99 of the full ``[L, d]`` matrix.
        deviation_limit: symmetric deviation scale, max(|p1|, |p99|) of the full deviation matrix.
    """

    label = "fig:alpha_panels"
    layers: tuple[int, ...]
    raw: np.ndarray
    deviation: np.ndarray
    raw_range: tuple[float, float]
    deviation_limit: float

    def table(self) -> pd.DataFrame:
        """One row per drawn layer: layer, mean, min, max of raw alpha and mean |deviation|."""
        flat = self.raw.reshape(len(self.layers), -1)
        return pd.DataFrame({"layer": self.layers, "mean": flat.mean(1), "min": flat.min(1), "max": flat.max(1),
                             "mean_abs_deviation": np.abs(self.deviation.reshape(len(self.layers), -1)).mean(1)})


def alpha_panels(alpha: np.ndarray, layers: Sequence[int] | None = None) -> AlphaPanels:
    """Grids for the panel figures; ``layers=None`` picks the paper's 0, 30, 40, 61 mapped onto this depth.

    Pass ``layers=range(L)`` for the full (all-layer) version.
    """
    arr = _check_alpha(alpha)
    n_layers, d = arr.shape
    if layers is None:
        layers = sorted({paper_layer(layer, n_layers) for layer in PAPER_SELECTED_LAYERS})
    layers = tuple(int(x) for x in layers)
    bad = [x for x in layers if not 0 <= x < n_layers]
    if bad:
        raise UsageError(f"layers {bad} are outside 0..{n_layers - 1}")
    rows, cols = panel_grid_shape(d)
    dev = arr - alpha_init()
    lo, hi = np.percentile(arr, [1, 99])
    dlo, dhi = np.percentile(dev, [1, 99])
    idx = list(layers)
    return AlphaPanels(layers, arr[idx].reshape(len(idx), rows, cols), dev[idx].reshape(len(idx), rows, cols),
                       (float(lo), float(hi)), float(max(abs(dlo), abs(dhi))))


@dataclass(frozen=True)
class SpecialisationProfile(AnalysisResult):
    """fig:alpha_specialisation_profile: within-layer percentiles of ``|alpha - alpha_init|``.

    Args:
        frame: one row per layer: layer, p25, p50, p75, p90, p95, p99.
    """

    label = "fig:alpha_specialisation_profile"
    frame: pd.DataFrame

    def table(self) -> pd.DataFrame:
        """The per-layer percentile frame."""
        return self.frame


def specialisation_profile(
    alpha: np.ndarray, percentiles: Sequence[float] = (25, 50, 75, 90, 95, 99)
) -> SpecialisationProfile:
    """Per-layer percentile bands of the absolute deviation from ``alpha_init`` (``alpha: [L, d]``)."""
    arr = _check_alpha(alpha)
    return SpecialisationProfile(_percentile_frame(np.abs(arr - alpha_init()), percentiles))


@dataclass(frozen=True)
class AlphaTrainingStats(AnalysisResult):
    """fig:alpha_global_stats_over_training: whole-model alpha statistics per training step.

    Args:
        frame: one row per step: step, mean, and (when the log has them) std, min, max.
    """

    label = "fig:alpha_global_stats_over_training"
    frame: pd.DataFrame

    def table(self) -> pd.DataFrame:
        """The per-step frame."""
        return self.frame


def global_stats_over_training(log: pd.DataFrame) -> AlphaTrainingStats | NotApplicable:
    """Pool per-layer alpha statistics of a training log into whole-model statistics per step.

    ``log`` has one row per (step, layer) with ``mean`` and optionally ``std`` (population std over
    the layer's d dimensions), ``min``, ``max``. Every layer has the same d, so the global mean is the
    mean of layer means and the global variance is ``mean(std^2 + mean^2) - global_mean^2``.
    """
    missing = [c for c in ("step", "layer", "mean") if c not in log.columns]
    if missing:
        raise UsageError(f"training log lacks columns {missing}; need step, layer, mean (+ std, min, max)")
    if log.empty:
        return NotApplicable("training log is empty", AlphaTrainingStats.label)
    grouped = log.groupby("step", sort=True)
    frame = pd.DataFrame({"mean": grouped["mean"].mean()})
    if "std" in log.columns:
        second = (log["std"] ** 2 + log["mean"] ** 2).groupby(log["step"]).mean()
        frame["std"] = np.sqrt(np.maximum(second - frame["mean"] ** 2, 0.0))
    if "min" in log.columns:
        frame["min"] = grouped["min"].min()
    if "max" in log.columns:
        frame["max"] = grouped["max"].max()
    frame["layers"] = grouped["layer"].nunique()
    return AlphaTrainingStats(frame.reset_index())
