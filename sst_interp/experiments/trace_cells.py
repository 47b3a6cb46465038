"""Trace cells aligned to each question's target position, with the statistics a heatmap cell needs.

A raw layer x position map averages, in column p, questions whose target is at p with questions whose target is
later: two different things. Aligned, a cell is (layer, offset) with offset = patched position - target position
(0: the target itself, -1: the token before it, ...), so every question in a cell is patched at the same distance
from what it is measured on. Each cell carries its question count, the mean indirect effect with its standard
error, the total effect (depth k - depth 1) of the same questions with its standard error, the exact sign test of
the indirect effects (none below 6 questions) and that p Holm-adjusted over every cell of the map
(:mod:`sst_interp.experiments.intervals`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sst_interp.experiments.intervals import adjusted, correction_label, sign_test

ALIGNED_COLUMNS = ("layer", "offset", "n_questions", "indirect_effect_mean", "indirect_effect_sem",
                   "total_effect_mean", "total_effect_sem", "sign_p", "sign_n", "sign_p_holm", "correction")


def aligned_cells(effects: pd.DataFrame, targets: pd.DataFrame, kind: str = "layer_position") -> pd.DataFrame:
    """Per (layer, offset) cell of the layer x position map (module docstring).

    Args:
        effects: one row per measurement: ``question_id, map, layer, position, indirect_effect`` (rows of maps
            other than ``kind`` are ignored).
        targets: one row per question with a target: ``question_id, target_position, total_effect``.

    Returns:
        DataFrame with :data:`ALIGNED_COLUMNS`, one row per cell, sorted by layer then offset.
    """
    rows = effects[effects["map"] == kind].merge(
        targets[["question_id", "target_position", "total_effect"]], on="question_id", how="inner")
    rows = rows.assign(offset=rows["position"] - rows["target_position"])
    out = []
    for (layer, offset), cell in rows.groupby(["layer", "offset"], sort=True):
        values = cell["indirect_effect"].to_numpy(float)
        total = cell["total_effect"].to_numpy(float)
        p, counted = sign_test(values, values)
        out.append({"layer": int(layer), "offset": int(offset), "n_questions": len(values),
                    "indirect_effect_mean": float(values.mean()), "indirect_effect_sem": _sem(values),
                    "total_effect_mean": float(total.mean()), "total_effect_sem": _sem(total),
                    "sign_p": p, "sign_n": counted})
    table = pd.DataFrame(out, columns=list(ALIGNED_COLUMNS[:-2]))
    table["sign_p_holm"] = adjusted(table["sign_p"].to_numpy(float))
    table["correction"] = correction_label(int(table["sign_p"].notna().sum()))
    return table[list(ALIGNED_COLUMNS)]


def _sem(values: np.ndarray) -> float:
    """Standard error of the mean (NaN for one value)."""
    return float(np.std(values, ddof=1) / np.sqrt(len(values))) if len(values) > 1 else float("nan")
