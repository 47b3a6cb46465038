"""Training logs as CSV, appended one step at a time (for fig:sst_vs_baseline_loss and
fig:alpha_global_stats_over_training).

- ``train_log.csv``: one row per optimiser step: ``step``, ``train_loss`` (token-weighted mean over the step),
  ``val_loss`` (empty unless validated at that step), ``lr_lora``, ``lr_sst`` (empty for the baseline),
  ``grad_norm`` (before clipping), ``tokens`` (labelled tokens in the step), ``epoch``, ``elapsed_s``.
- ``alpha_log.csv`` (SST only): one row per (step, layer): ``step``, ``layer``, ``mean``, ``std`` (population std
  over the layer's d coefficients), ``min``, ``max``, ``p5``, ``p25``, ``p50``, ``p75``, ``p95``. Step 0 is the
  initialisation. :func:`sst_interp.analyses.alpha.global_stats_over_training` reads it.

Rows after a resumed step are dropped on resume (:meth:`TrainLogs.truncate_after`), so a log never holds two rows
for one step.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

TRAIN_LOG = "train_log.csv"
ALPHA_LOG = "alpha_log.csv"
TRAIN_COLUMNS: tuple[str, ...] = (
    "step", "train_loss", "val_loss", "lr_lora", "lr_sst", "grad_norm", "tokens", "epoch", "elapsed_s",
)
ALPHA_PERCENTILES: tuple[int, ...] = (5, 25, 50, 75, 95)
ALPHA_COLUMNS: tuple[str, ...] = ("step", "layer", "mean", "std", "min", "max") + tuple(
    f"p{p}" for p in ALPHA_PERCENTILES
)


def alpha_stats(alpha: np.ndarray, layers: Sequence[int], step: int) -> pd.DataFrame:
    """Per-layer statistics of the blend coefficients.

    Args:
        alpha: [L, d] blend coefficients.
        layers: the decoder-layer index of each row of ``alpha``.
        step: optimiser step (0 = initialisation).

    Returns:
        One row per layer with the columns of :data:`ALPHA_COLUMNS`.
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    quantiles = np.percentile(alpha, ALPHA_PERCENTILES, axis=1)  # [5, L]
    frame = pd.DataFrame(
        {
            "step": step,
            "layer": np.asarray(layers, dtype=np.int64),
            "mean": alpha.mean(axis=1),
            "std": alpha.std(axis=1),
            "min": alpha.min(axis=1),
            "max": alpha.max(axis=1),
        }
    )
    for row, p in enumerate(ALPHA_PERCENTILES):
        frame[f"p{p}"] = quantiles[row]
    return frame


class TrainLogs:
    """Appends rows to the CSV logs of one training run folder."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.train_path = self.folder / TRAIN_LOG
        self.alpha_path = self.folder / ALPHA_LOG

    def log_step(self, row: dict[str, Any]) -> None:
        """Append one row to ``train_log.csv`` (missing columns are left empty)."""
        _append(self.train_path, TRAIN_COLUMNS, [row])

    def log_alpha(self, alpha: np.ndarray, layers: Sequence[int], step: int) -> None:
        """Append the per-layer alpha statistics of ``step`` to ``alpha_log.csv`` (``alpha``: [L, d])."""
        frame = alpha_stats(alpha, layers, step)
        _append(self.alpha_path, ALPHA_COLUMNS, frame.to_dict("records"))

    def truncate_after(self, step: int) -> None:
        """Drop rows of steps after ``step`` (a resumed run logs them again)."""
        for path in (self.train_path, self.alpha_path):
            if path.is_file():
                frame = pd.read_csv(path)
                frame[frame["step"] <= step].to_csv(path, index=False)

    def read_train(self) -> pd.DataFrame:
        """``train_log.csv`` as a DataFrame (empty when not written yet)."""
        return pd.read_csv(self.train_path) if self.train_path.is_file() else pd.DataFrame(columns=TRAIN_COLUMNS)

    def read_alpha(self) -> pd.DataFrame:
        """``alpha_log.csv`` as a DataFrame (empty when not written yet)."""
        return pd.read_csv(self.alpha_path) if self.alpha_path.is_file() else pd.DataFrame(columns=ALPHA_COLUMNS)


def _append(path: Path, columns: Sequence[str], rows: list[dict[str, Any]]) -> None:
    new = not path.is_file()
    with path.open("a", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), extrasaction="raise")
        if new:
            writer.writeheader()
        for row in rows:
            writer.writerow({key: ("" if value is None else value) for key, value in row.items()})
