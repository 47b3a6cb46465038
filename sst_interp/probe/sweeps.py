"""Layer sweep (``tab:halting_probe_layer_sweep``) and activation swap (``sec:halting_probe_feature``).

Layer sweep: at every layer a fresh probe is trained (same pipeline) and evaluated in sample, scored held out
(:mod:`~sst_interp.probe.crossfit`, ``heldout_*`` columns), and LOOCV is run on the chosen layers (binomial and,
with ``permutations > 0``, permutation p-values). The paper picks the shallowest layer with zero overthinks whose
LOOCV is significant at p < 0.05 (:func:`select_layer`); the report picks by the held-out scores
(:func:`select_heldout_layer`), never by in-sample separation. :func:`sweep_layers` is the default grid: every
layer of a model with at most 32 layers, else 16 evenly spaced layers including the first and the last.

Activation swap: the same bottleneck probe with SiLU, GELU and ReLU: evaluation and LOOCV.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import pandas as pd

from sst_interp.kernels.results import AnalysisResult
from sst_interp.kernels.errors import UsageError
from sst_interp.probe.crossfit import DEFAULT_FOLDS, crossfit
from sst_interp.probe.dataset import ProbeData
from sst_interp.probe.defaults import DEFAULT_ALPHA
from sst_interp.probe.evaluate import evaluate_probe
from sst_interp.probe.loocv import LoocvResult, loocv
from sst_interp.probe.model import DEFAULT_THRESHOLD, ProbeConfig
from sst_interp.probe.train import TrainConfig, train_probe

#: Models with at most this many layers are swept at every layer; deeper ones on an even grid of this many.
FULL_SWEEP_MAX_LAYERS = 32
SWEEP_GRID = 16


def sweep_layers(num_layers: int) -> list[int]:
    """Default sweep: every layer when ``num_layers <= 32``, else 16 evenly spaced layers with the first and last.

    Why the whole depth: the paper's sweep (layers 3..29 of 62) covers only the first half, so a feature deeper
    than that could never be found.
    """
    if num_layers < 1:
        raise UsageError(f"a layer sweep needs at least one layer, got {num_layers}")
    if num_layers <= FULL_SWEEP_MAX_LAYERS:
        return list(range(num_layers))
    return sorted({int(round(v)) for v in np.linspace(0, num_layers - 1, SWEEP_GRID)})


def _loocv_columns(result: LoocvResult | None) -> dict[str, object]:
    if result is None:
        return {"loocv_correct": None, "loocv_folds": None, "loocv_accuracy": np.nan, "loocv_base_rate": np.nan,
                "loocv_p": np.nan, "loocv_p_permutation": np.nan, "loocv_permutations": 0,
                "loocv_p_depth_matched": np.nan}
    return {
        "loocv_correct": result.successes,
        "loocv_folds": result.n_folds,
        "loocv_accuracy": result.accuracy,
        "loocv_base_rate": result.base_rate,
        "loocv_p": result.p_binomial,
        "loocv_p_permutation": result.p_permutation,
        "loocv_permutations": result.n_permutations,
        "loocv_p_depth_matched": result.p_value_depth_matched,
    }


@dataclass(frozen=True)
class LayerSweep(AnalysisResult):
    """Per-layer evaluation and LOOCV (``tab:halting_probe_layer_sweep``).

    Args:
        rows: one row per layer: ``layer``, the in-sample evaluation columns, the held-out ``heldout_*`` columns
            (:meth:`~sst_interp.probe.crossfit.HeldOutScores.row`), ``loocv_correct``, ``loocv_folds``,
            ``loocv_accuracy``, ``loocv_base_rate``, ``loocv_p`` (binomial), ``loocv_p_permutation``
            (NaN/None where LOOCV or the permutation test was not run).
    """

    rows: pd.DataFrame
    label: ClassVar[str] = "tab:halting_probe_layer_sweep"

    def table(self) -> pd.DataFrame:
        """The sweep rows."""
        return self.rows


def layer_sweep(
    data_by_layer: Mapping[int, ProbeData],
    probe_config: ProbeConfig | None = None,
    train_config: TrainConfig | None = None,
    loocv_layers: Iterable[int] = (),
    threshold: float = DEFAULT_THRESHOLD,
    permutations: int = 0,
    heldout_folds: int = DEFAULT_FOLDS,
    permutation_seed: int = 0,
    permutation_alpha: float = DEFAULT_ALPHA,
) -> LayerSweep:
    """Train and evaluate a probe at every layer, score it held out; LOOCV at ``loocv_layers``.

    Args:
        data_by_layer: ``{layer: ProbeData}`` (see :func:`~sst_interp.probe.dataset.load_probe_data_layers`).
        probe_config: architecture (``input_size`` is taken from the data); default 64 units and SiLU,
            as the paper's sweep.
        train_config: hyperparameters.
        loocv_layers: layers to run LOOCV on (it trains one probe per MUST HALT question).
        threshold: halting threshold.
        permutations: the most label permutations of each LOOCV's sequential permutation test (0: binomial only).
        permutation_seed: seed of those permutations.
        permutation_alpha: the level that test settles its answer at.
        heldout_folds: question folds of the held-out scores (``heldout_folds`` trainings per layer).
    """
    loocv_set = {int(v) for v in loocv_layers}
    rows = []
    for layer in sorted(data_by_layer):
        data = data_by_layer[layer]
        config = replace(probe_config or ProbeConfig(data.hidden_size, hidden=64), input_size=data.hidden_size)
        data.labels.require_must_halt()
        probe, _ = train_probe(data.x, data.y, config, train_config)
        ev = evaluate_probe(probe, data, threshold)
        held = crossfit(data, config, train_config, threshold, heldout_folds)
        cv = None
        if layer in loocv_set:
            cv = loocv(data, config, train_config, threshold, full_predicted=ev.detection.predicted,
                       permutations=permutations, permutation_seed=permutation_seed,
                       permutation_alpha=permutation_alpha)
        rows.append({"layer": layer, **ev.row(), **held.row(), **_loocv_columns(cv)})
    return LayerSweep(pd.DataFrame(rows))


def select_layer(sweep: LayerSweep, alpha: float = 0.05) -> int | None:
    """The paper's rule: the shallowest layer with zero overthinks and LOOCV p < ``alpha`` (``None`` if none).

    The p-value is the permutation p where it was computed, else the paper's binomial p (uncalibrated).
    """
    rows = sweep.rows
    p = rows["loocv_p_permutation"].fillna(rows["loocv_p"]) if "loocv_p_permutation" in rows else rows["loocv_p"]
    ok = rows[(rows["overthinks"] == 0) & (p < alpha)]
    return None if ok.empty else int(ok["layer"].min())


def select_heldout_layer(sweep: LayerSweep) -> tuple[int, str]:
    """The layer with the best held-out result, and why: most held-out correct questions, then fewest held-out
    overthinks, then highest held-out AUC, then the shallowest layer (cheapest to read at generation time).
    """
    rows = sweep.rows.copy()
    rows["_auc"] = rows["heldout_auc"].fillna(0.0)
    rows["_ot"] = -rows["heldout_overthinks"]
    best = rows.sort_values(["heldout_correct", "_ot", "_auc", "layer"], ascending=[False, False, False, True]).iloc[0]
    reason = (f"layer {int(best['layer'])}: most held-out correct questions ({int(best['heldout_correct'])}/"
              f"{int(best['n_questions'])}, {int(best['heldout_overthinks'])} overthinks, held-out AUC "
              f"{best['heldout_auc']:.2f}) of {len(rows)} swept layers; held-out = question-fold cross-fitted probes")
    return int(best["layer"]), reason


@dataclass(frozen=True)
class ActivationSwap(AnalysisResult):
    """Evaluation and LOOCV of the bottleneck probe with each activation.

    Args:
        rows: one row per activation with the evaluation and LOOCV columns.
    """

    rows: pd.DataFrame
    label: ClassVar[str] = "sec:halting_probe_feature"

    def table(self) -> pd.DataFrame:
        """One row per activation."""
        return self.rows


def activation_swap(
    data: ProbeData,
    hidden: int = 10,
    activations: Sequence[str] = ("silu", "gelu", "relu"),
    train_config: TrainConfig | None = None,
    with_loocv: bool = True,
    threshold: float = DEFAULT_THRESHOLD,
) -> ActivationSwap:
    """Train the ``hidden``-unit probe with each activation; evaluate and (optionally) LOOCV each."""
    rows = []
    for act in activations:
        config = ProbeConfig(data.hidden_size, hidden=hidden, activation=act)
        probe, _ = train_probe(data.x, data.y, config, train_config)
        ev = evaluate_probe(probe, data, threshold)
        cv = loocv(data, config, train_config, threshold, full_predicted=ev.detection.predicted) if with_loocv else None
        rows.append({"activation": act, **ev.row(), **_loocv_columns(cv)})
    return ActivationSwap(pd.DataFrame(rows))
