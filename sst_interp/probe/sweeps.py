"""Layer sweep (``tab:halting_probe_layer_sweep``) and activation swap (``sec:halting_probe_feature``).

Layer sweep: at every layer a fresh probe is trained (same pipeline) and evaluated; LOOCV is run
on the chosen layers. The paper picks the shallowest layer with zero overthinks whose LOOCV is
significant at p < 0.05 (:func:`select_layer`).

Activation swap: the same bottleneck probe with SiLU, GELU and ReLU: evaluation and LOOCV.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import pandas as pd

from sst_interp.analyses.results import AnalysisResult
from sst_interp.probe.dataset import ProbeData
from sst_interp.probe.evaluate import evaluate_probe
from sst_interp.probe.loocv import LoocvResult, loocv
from sst_interp.probe.model import DEFAULT_THRESHOLD, ProbeConfig
from sst_interp.probe.train import TrainConfig, train_probe


def _loocv_columns(result: LoocvResult | None) -> dict[str, object]:
    if result is None:
        return {"loocv_correct": None, "loocv_folds": None, "loocv_accuracy": np.nan, "loocv_base_rate": np.nan,
                "loocv_p": np.nan, "loocv_p_depth_matched": np.nan}
    return {
        "loocv_correct": result.successes,
        "loocv_folds": result.n_folds,
        "loocv_accuracy": result.accuracy,
        "loocv_base_rate": result.base_rate,
        "loocv_p": result.p_value,
        "loocv_p_depth_matched": result.p_value_depth_matched,
    }


@dataclass(frozen=True)
class LayerSweep(AnalysisResult):
    """Per-layer evaluation and LOOCV (``tab:halting_probe_layer_sweep``).

    Args:
        rows: one row per layer: ``layer``, the evaluation columns, ``loocv_correct``, ``loocv_folds``,
            ``loocv_accuracy``, ``loocv_base_rate``, ``loocv_p`` (NaN/None where LOOCV was not run).
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
) -> LayerSweep:
    """Train and evaluate a probe at every layer; LOOCV at ``loocv_layers``.

    Args:
        data_by_layer: ``{layer: ProbeData}`` (see :func:`~sst_interp.probe.dataset.load_probe_data_layers`).
        probe_config: architecture (``input_size`` is taken from the data); default 64 units and SiLU,
            as the paper's sweep.
        train_config: hyperparameters.
        loocv_layers: layers to run LOOCV on (it trains one probe per MUST HALT question).
        threshold: halting threshold.
    """
    loocv_set = {int(v) for v in loocv_layers}
    rows = []
    for layer in sorted(data_by_layer):
        data = data_by_layer[layer]
        config = replace(probe_config or ProbeConfig(data.hidden_size, hidden=64), input_size=data.hidden_size)
        data.labels.require_must_halt()
        probe, _ = train_probe(data.x, data.y, config, train_config)
        ev = evaluate_probe(probe, data, threshold)
        cv = None
        if layer in loocv_set:
            cv = loocv(data, config, train_config, threshold, full_predicted=ev.detection.predicted)
        rows.append({"layer": layer, **ev.row(), **_loocv_columns(cv)})
    return LayerSweep(pd.DataFrame(rows))


def select_layer(sweep: LayerSweep, alpha: float = 0.05) -> int | None:
    """The shallowest layer with zero overthinks and LOOCV p < ``alpha`` (``None`` if none qualifies)."""
    rows = sweep.rows
    ok = rows[(rows["overthinks"] == 0) & (rows["loocv_p"] < alpha)]
    return None if ok.empty else int(ok["layer"].min())


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
