"""Input-dimension ablation: isolating the feature (``app:halting_input_ablation``,
``sec:halting_probe_feature``, ``tab:halting_probe_topk_sweep``, ``tab:halting_probe_greedy_prune``,
``fig:feature_position_grid``).

All of it is inference-only on the frozen probe: dimensions are zeroed in the position-0 states
before the probe reads them (training timesteps and evaluation states alike) and the full
halting evaluation is rerun. "Reproduces the baseline" means the same
``(correct, overthinks, missed)`` as the unablated probe.

1. Rank every dimension by effective weight importance ``sum_j |W2_j| |W1_ji|``.
2. Top-``K`` sweep: keep the top ``K``, zero the rest, over a grid of ``K``; the minimum ``K`` that
   reproduces the baseline is found by binary search between the largest grid ``K`` that does
   not and the smallest grid ``K`` that does (the paper searched 750..775 and found 761; the
   sweep is not monotone overall, so the search is confined to that bracket).
3. Greedy pruning: from the top-``K*`` set, least important first, zero each dimension
   (keeping those already pruned zeroed); keep it zeroed if the baseline holds, otherwise
   restore it and mark it essential.
4. A linear probe ``Linear(k, 1)`` trained (same pipeline) on the essential dimensions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from sst_interp.kernels.results import AnalysisResult
from sst_interp.kernels.errors import UsageError
from sst_interp.probe.dataset import ProbeData
from sst_interp.probe.evaluate import ProbeEvaluation, evaluate_probe
from sst_interp.probe.model import DEFAULT_THRESHOLD, HaltingProbe, ProbeConfig
from sst_interp.probe.train import TrainConfig, TrainReport, train_probe


def importance_ranking(probe: HaltingProbe) -> tuple[np.ndarray, np.ndarray]:
    """``(importance [d], ranking [d])``: weight importance and dimensions by decreasing importance (ties by index)."""
    imp = probe.input_importance().numpy().astype(np.float64)
    return imp, np.lexsort((np.arange(len(imp)), -imp)).astype(np.int64)


def keep_mask(d: int, keep: Sequence[int] | np.ndarray) -> np.ndarray:
    """``[d]`` float32 mask with 1 at ``keep`` and 0 elsewhere."""
    m = np.zeros(d, dtype=np.float32)
    m[np.asarray(keep, dtype=np.int64)] = 1.0
    return m


def default_k_grid(d: int) -> list[int]:
    """Powers of two below ``d``, plus ``d`` itself."""
    grid = [2**i for i in range(int(math.log2(max(d, 1))) + 1) if 2**i < d]
    return [*grid, d]


@dataclass(frozen=True)
class TopKSweep(AnalysisResult):
    """Top-``K`` input-dimension sweep (``tab:halting_probe_topk_sweep``).

    Args:
        rows: one row per evaluated ``K`` (grid and binary-search points), ascending: ``K``,
            ``grid`` (False for binary-search points), ``baseline_match`` and the evaluation columns.
        minimal_k: the minimum ``K`` reproducing the baseline (``None`` if no ``K`` does).
        baseline: the unablated probe's ``(correct, overthinks, missed)``.
    """

    rows: pd.DataFrame
    minimal_k: int | None
    baseline: tuple[int, int, int]
    label: ClassVar[str] = "tab:halting_probe_topk_sweep"

    def table(self) -> pd.DataFrame:
        """The sweep rows, with ``minimal`` marking ``K*``."""
        out = self.rows.copy()
        out["minimal"] = out["K"] == (self.minimal_k if self.minimal_k is not None else -1)
        return out


def topk_sweep(
    probe: HaltingProbe,
    data: ProbeData,
    ks: Sequence[int] | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> TopKSweep:
    """Top-``K`` sweep plus binary search for the minimal ``K`` (module docstring, step 2).

    Args:
        probe: the frozen trained probe.
        data: labels and states; ``d`` = ``data.hidden_size``.
        ks: grid of ``K`` (default: powers of two and ``d``); ``d`` is always included.
        threshold: halting threshold.
    """
    d = data.hidden_size
    _, ranking = importance_ranking(probe)
    baseline = evaluate_probe(probe, data, threshold).outcome.key()
    grid = sorted({int(k) for k in (ks if ks is not None else default_k_grid(d)) if 0 < int(k) <= d} | {d})
    results: dict[int, ProbeEvaluation] = {}

    def run(k: int) -> bool:
        if k not in results:
            results[k] = evaluate_probe(probe, data, threshold, input_mask=keep_mask(d, ranking[:k]))
        return results[k].outcome.key() == baseline

    matches = [run(k) for k in grid]
    first = next((i for i, m in enumerate(matches) if m), None)
    minimal = None
    if first is not None:
        lo = grid[first - 1] if first > 0 else 0  # lo fails (or is the empty set), hi matches
        hi = grid[first]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if run(mid):
                hi = mid
            else:
                lo = mid
        minimal = hi
    rows = [
        {"K": k, "grid": k in grid, "baseline_match": results[k].outcome.key() == baseline, **results[k].row()}
        for k in sorted(results)
    ]
    return TopKSweep(pd.DataFrame(rows), minimal, baseline)


@dataclass(frozen=True)
class GreedyPrune(AnalysisResult):
    """Greedy pruning to the essential set (``tab:halting_probe_greedy_prune``).

    Args:
        start: ``[K*]`` the starting dimensions (top-``K*`` by importance), in importance order.
        essential: sorted essential dimensions (cannot be zeroed without breaking the baseline).
        importance: ``[d]`` weight importance of every dimension.
        baseline: ``(correct, overthinks, missed)`` that must hold.
        final: ``(correct, overthinks, missed)`` with only the essential dimensions kept.
    """

    start: np.ndarray
    essential: np.ndarray
    importance: np.ndarray
    baseline: tuple[int, int, int]
    final: tuple[int, int, int]
    label: ClassVar[str] = "tab:halting_probe_greedy_prune"

    @property
    def importance_ranks(self) -> np.ndarray:
        """``[n_essential]`` 1-based importance rank of each essential dimension."""
        order = np.lexsort((np.arange(len(self.importance)), -self.importance))
        rank = np.empty_like(order)
        rank[order] = np.arange(1, len(order) + 1)
        return rank[self.essential]

    def table(self) -> pd.DataFrame:
        """Starting set, pruned, essential, final verification."""
        c, ot, miss = self.final
        return pd.DataFrame(
            [
                ("Starting set (top-K by weight importance)", len(self.start)),
                ("Pruned (redundant)", len(self.start) - len(self.essential)),
                ("Essential (cannot remove)", len(self.essential)),
                (f"Final verification: correct {c}, OT = {ot}, Miss = {miss}", int(self.final == self.baseline)),
            ],
            columns=["item", "count"],
        )


def greedy_prune(
    probe: HaltingProbe,
    data: ProbeData,
    k: int,
    threshold: float = DEFAULT_THRESHOLD,
) -> GreedyPrune:
    """Greedy pruning within the top-``k`` dimensions (module docstring, step 3).

    Args:
        probe: the frozen trained probe.
        data: labels and states.
        k: size of the starting set (the minimal ``K`` of :func:`topk_sweep`).
        threshold: halting threshold.
    """
    d = data.hidden_size
    if not 0 < k <= d:
        raise UsageError(f"greedy pruning needs 0 < k <= d = {d}, got {k}")
    importance, ranking = importance_ranking(probe)
    baseline = evaluate_probe(probe, data, threshold).outcome.key()
    start = ranking[:k]
    kept = set(int(i) for i in start)
    essential: list[int] = []
    for dim in start[::-1]:  # least important first
        kept.discard(int(dim))
        trial = evaluate_probe(probe, data, threshold, input_mask=keep_mask(d, sorted(kept)))
        if trial.outcome.key() != baseline:
            kept.add(int(dim))
            essential.append(int(dim))
    ess = np.array(sorted(essential), dtype=np.int64)
    final = evaluate_probe(probe, data, threshold, input_mask=keep_mask(d, ess)).outcome.key()
    return GreedyPrune(np.asarray(start), ess, importance, baseline, final)


def train_linear_on(
    data: ProbeData, dims: Sequence[int] | np.ndarray, train_config: TrainConfig | None = None
) -> tuple[HaltingProbe, TrainReport]:
    """The linear probe ``Linear(len(dims), 1)`` on the given dimensions, same pipeline as the MLP."""
    dims = sorted(int(i) for i in dims)
    config = ProbeConfig(input_size=data.hidden_size, hidden=None, dims=tuple(dims))
    return train_probe(data.x, data.y, config, train_config)


@dataclass(frozen=True)
class FeatureGrid(AnalysisResult):
    """Data for ``fig:feature_position_grid``: every dimension on a ``rows x cols`` grid.

    Dimension ``i`` sits at row ``i // cols`` (row 0 at the bottom) and column ``i % cols``
    (84 x 64 for d = 5376).

    Args:
        grid: ``[rows, cols]`` importance of essential dimensions, NaN elsewhere (and past ``d``).
        essential: the essential dimensions.
        importance: ``[d]`` importance of every dimension.
    """

    grid: np.ndarray
    essential: np.ndarray
    importance: np.ndarray
    label: ClassVar[str] = "fig:feature_position_grid"

    def table(self) -> pd.DataFrame:
        """One row per essential dimension: ``dim``, ``row``, ``col``, ``importance``."""
        cols = self.grid.shape[1]
        e = np.asarray(self.essential, dtype=np.int64)
        return pd.DataFrame({"dim": e, "row": e // cols, "col": e % cols, "importance": self.importance[e]})


def feature_grid(importance: np.ndarray, essential: Sequence[int] | np.ndarray, cols: int = 64) -> FeatureGrid:
    """Lay ``importance: [d]`` of the ``essential`` dimensions on a grid of ``cols`` columns."""
    importance = np.asarray(importance, dtype=np.float64)
    d = len(importance)
    cols = max(1, min(int(cols), d))
    rows = -(-d // cols)
    flat = np.full(rows * cols, np.nan)
    e = np.asarray(essential, dtype=np.int64)
    flat[e] = importance[e]
    return FeatureGrid(flat.reshape(rows, cols), e, importance)
