"""Overlap-regime labels (low-overlap vs stable) as a plain table, so logit analyses need no basins internals.

A label says whether a position is a low-overlap (basin-shift) position for one comparison of two
iterations inside one run: the top-k overlap between that run's hidden states at ``iter_a`` and
``iter_b``, reduced over layers and thresholded at the GMM crossover (0.976 in the paper).

Label table columns (one row per labelled position):

=============  ======  ==========================================================
``depth``      int     the run (flat depth) whose hidden states were compared
``question_id`` str
``turn``       int
``position``   int     generated position
``iter_a``     int     first iteration compared (usually 1)
``iter_b``     int     second iteration compared
``low_overlap`` bool   True for a low-overlap (basin-shift) position
=============  ======  ==========================================================

Which label each logit comparison uses (app:logit_methodology):

- cross-run pair (a, b): the higher run's own iteration 1 vs iteration b, key ``(b, 1, b)``;
- within-run iteration 1 vs j in run d: key ``(d, 1, j)``;
- consecutive transitions i -> i+1 in run d: key ``(d, i, i + 1)``.

The basins module computes labels from recorded runs; :func:`labels_from_overlap` builds them from
overlap arrays for one question (useful for tests and notebooks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd

from sst_interp.analyses.layers import scaled_top_k
from sst_interp.analyses.overlap import overlap_from_indices, topk_indices
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.paper import PAPER_THRESHOLD

LABEL_COLUMNS = ("depth", "question_id", "turn", "position", "iter_a", "iter_b", "low_overlap")
KEY = ["depth", "question_id", "turn", "position", "iter_a", "iter_b"]


def check_labels(labels: pd.DataFrame) -> pd.DataFrame:
    """Validate a label table (columns above, unique keys) and return it with normalised dtypes."""
    missing = [c for c in LABEL_COLUMNS if c not in labels.columns]
    if missing:
        raise UsageError(f"regime label table lacks columns {missing}; expected {list(LABEL_COLUMNS)}")
    out = labels.loc[:, list(LABEL_COLUMNS)].copy()
    for col in ("depth", "turn", "position", "iter_a", "iter_b"):
        out[col] = out[col].astype(np.int64)
    out["question_id"] = out["question_id"].astype(str)
    out["low_overlap"] = out["low_overlap"].astype(bool)
    if out.duplicated(KEY).any():
        raise UsageError("regime label table has duplicate (depth, question, turn, position, iter_a, iter_b) rows")
    return out


def labels_from_overlap(
    overlap: np.ndarray,
    *,
    depth: int,
    question_id: str,
    iter_a: int,
    iter_b: int,
    turn: int = 0,
    positions: Sequence[int] | None = None,
    layers: Sequence[int] | None = None,
    threshold: float = PAPER_THRESHOLD,
    reduce: Literal["mean", "min", "median"] = "min",
) -> pd.DataFrame:
    """Label table rows from ``overlap: [P, L]`` (top-k overlap per position and layer).

    A position is low-overlap when the ``reduce`` of its overlaps over ``layers`` (default: all) is
    below ``threshold``. The default ``"min"`` (below the threshold at any layer) matches the basins
    module's default rule ``"any"``. NaN overlaps (a layer not visited at both iterations) are left out of the
    reduce; a position needs one layer with an overlap.
    """
    arr = np.asarray(overlap, dtype=np.float64)
    if arr.ndim != 2:
        raise UsageError(f"overlap must be [positions, layers], got shape {arr.shape}")
    cols = arr if layers is None else arr[:, list(layers)]
    reducer = {"mean": np.nanmean, "min": np.nanmin, "median": np.nanmedian}.get(reduce)
    if reducer is None:
        raise UsageError(f"unknown reduce {reduce!r}; use mean, min or median")
    pos = np.arange(arr.shape[0]) if positions is None else np.asarray(positions, dtype=np.int64)
    if pos.shape[0] != arr.shape[0]:
        raise UsageError(f"{pos.shape[0]} positions given for an overlap array with {arr.shape[0]} rows")
    return pd.DataFrame({"depth": depth, "question_id": question_id, "turn": turn, "position": pos,
                         "iter_a": iter_a, "iter_b": iter_b, "low_overlap": reducer(cols, axis=1) < threshold})


def attach_labels(records: pd.DataFrame, labels: pd.DataFrame | None) -> pd.DataFrame:
    """Add ``low_overlap`` (nullable bool) to records keyed by ``label_depth``, ``label_iter_a``, ``label_iter_b``."""
    if labels is None or records.empty:
        return records.assign(low_overlap=pd.Series(pd.NA, index=records.index, dtype="boolean"))
    lab = check_labels(labels).rename(columns={"depth": "label_depth", "iter_a": "label_iter_a",
                                               "iter_b": "label_iter_b"})
    on = ["label_depth", "question_id", "turn", "position", "label_iter_a", "label_iter_b"]
    merged = records.merge(lab, on=on, how="left", validate="many_to_one")
    merged["low_overlap"] = merged["low_overlap"].astype("boolean")
    return merged


def needed_pairs(depths: Sequence[int]) -> list[tuple[int, int, int]]:
    """The (depth, iter_a, iter_b) label keys the logit analyses read for a run with these depths.

    Iteration 1 vs j (2 <= j <= d) for every run d, and consecutive transitions i -> i+1 of the deepest run.
    """
    depths = sorted(int(d) for d in depths)
    keys = {(d, 1, j) for d in depths for j in range(2, d + 1)}
    deep = depths[-1]
    keys |= {(deep, i, i + 1) for i in range(1, deep)}
    return sorted(keys)


def labels_from_run(
    run: Any,
    threshold: float = PAPER_THRESHOLD,
    layers: Sequence[int] | None = None,
    reduce: Literal["mean", "min", "median"] = "min",
    k: int | None = None,
    turn: int = 0,
    question_ids: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Regime labels for every key of :func:`needed_pairs`, from the run's within-run top-k overlaps.

    Reads each depth's hidden states once, one question at a time, takes the top-k index sets of every
    iteration (:func:`sst_interp.analyses.overlap.topk_indices`; k defaults to ``round(d * 1024 / 5376)``)
    and compares them per key. A position is low-overlap when the ``reduce`` over ``layers`` (default: all)
    of its overlaps is below ``threshold`` (default: the paper's GMM crossover 0.976; pass the crossover
    that :func:`sst_interp.analyses.basins.fit_gmm` finds for this run to match the basins module).
    """

    k = scaled_top_k(run.hidden_size) if k is None else int(k)
    keys = needed_pairs(run.depths)
    frames = []
    for depth in sorted({d for d, _, _ in keys}):
        pairs = [(a, b) for d, a, b in keys if d == depth]
        for block in run.hidden(depth, question_ids=question_ids, turn=turn):
            its = block.iterations.tolist()
            idx = {it: topk_indices(block.values[:, its.index(it)], k) for it in {x for p in pairs for x in p}
                   if it in its}
            for a, b in pairs:
                if a not in idx or b not in idx:
                    continue
                # [P, L]: the layer was visited at both iterations (a family's layers outside its loop are not)
                seen = ~np.isnan(block.values[:, [its.index(a), its.index(b)]]).any(axis=(1, 3))
                ov = np.where(seen, overlap_from_indices(idx[a], idx[b], run.hidden_size), np.nan)  # [P, L]
                ok = (seen if layers is None else seen[:, list(layers)]).any(axis=1)
                frames.append(labels_from_overlap(ov[ok], depth=depth, question_id=block.question_id, iter_a=a,
                                                  iter_b=b, turn=block.turn, positions=block.positions[ok],
                                                  layers=layers, threshold=threshold, reduce=reduce))
    if not frames:
        return pd.DataFrame(columns=list(LABEL_COLUMNS))
    return pd.concat(frames, ignore_index=True)
