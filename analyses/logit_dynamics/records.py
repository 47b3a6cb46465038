"""Comparison records of output distributions (app:logit_methodology), built one question at a time.

Two comparison methods:

- **cross-run** (pair of runs a < b, final iterations, pre-divergence): positions ``0..f`` where ``f``
  is the first position at which the two runs' emitted tokens (final-iteration argmax) differ; the
  token history is identical up to and including ``f``, so ``f`` itself is a clean record (it is where
  the argmax change happens). Without a disagreement inside the window every window position is clean.
- **within-run** (run d, iteration 1 vs iteration j, every position): for every run d and 2 <= j <= d.

Per record (original = lower run / iteration 1, new = higher run / iteration j):

``changed``          argmax differs
``gap``              top-1 minus top-2 log-prob of the original distribution (nats)
``replaced``         original top-n tokens (n = ``top_n``, 100 in the paper) missing from the new top-n
``suppression``      new minus original log-prob of the original argmax token (NaN when the token is
                     outside the new top-K and no tracked log-prob exists)
``new_winner_rank``  1-based rank of the new argmax in the original distribution (NaN beyond top-K)
``top5_rank_shift_k`` / ``top5_lp_shift_k``  for the original rank-(k+1) token, if still in the new top-n:
                     |new rank - old rank| and new minus original log-prob (else NaN)

Within-run comparisons use the recorded ``tracked_logprobs`` (exact log-probs of the iteration-1
top-K at every iteration); cross-run comparisons look tokens up in the other run's top-K.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd

from sst_interp.analyses.logit_dynamics.regimes import attach_labels
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.outcomes import first_divergence

N_TOP5 = 5


class LogitLike(Protocol):
    """What the record builders read from a LogitBlock (see :class:`sst_interp.store.LogitBlock`)."""

    question_id: str
    turn: int
    positions: np.ndarray  # [P]
    iterations: np.ndarray  # [I]
    argmax: np.ndarray  # [P, I]
    top_ids: np.ndarray  # [P, I, K]
    top_logprobs: np.ndarray  # [P, I, K]
    tracked_logprobs: np.ndarray  # [P, I, K]


def _sorted(ids: np.ndarray, lp: np.ndarray, extra: np.ndarray | None = None):
    order = np.argsort(-lp, axis=-1, kind="stable")
    out = (np.take_along_axis(ids, order, -1), np.take_along_axis(lp, order, -1))
    return out + ((None if extra is None else np.take_along_axis(extra, order, -1)),)


def compare_distributions(
    orig_ids: np.ndarray,
    orig_lp: np.ndarray,
    new_ids: np.ndarray,
    new_lp: np.ndarray,
    orig_argmax: np.ndarray,
    new_argmax: np.ndarray,
    top_n: int = 100,
    new_lp_of_orig: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Compare two sets of per-position distributions.

    Args:
        orig_ids, orig_lp: ``[P, K]`` top-K token ids and log-probs of the original distribution.
        new_ids, new_lp: ``[P, K]`` the same for the new distribution.
        orig_argmax, new_argmax: ``[P]`` argmax tokens.
        top_n: size of the top-n sets compared (<= K).
        new_lp_of_orig: optional ``[P, K]`` exact new log-probs of ``orig_ids`` (tracked), aligned with
            ``orig_ids`` as given.

    Returns:
        dict of ``[P]`` arrays (changed, gap, replaced, suppression, new_winner_rank) and ``[P, 5]``
        arrays (top5_rank_shift, top5_lp_shift); NaN where undefined.
    """
    k = orig_ids.shape[-1]
    if new_ids.shape[-1] < top_n or k < max(top_n, 2):
        raise UsageError(f"top_n={top_n} exceeds the recorded top-K ({min(k, new_ids.shape[-1])}); pass top_n <= K")
    o_ids, o_lp, tracked = _sorted(orig_ids, orig_lp, new_lp_of_orig)
    n_ids, n_lp, _ = _sorted(new_ids, new_lp)
    if tracked is None:
        match = o_ids[:, :, None] == n_ids[:, None, :]  # [P, K, K]
        found = match.any(-1)
        tracked = np.where(found, np.take_along_axis(n_lp, match.argmax(-1), -1), np.nan)
    rows = np.arange(o_ids.shape[0])
    gap = o_lp[:, 0] - o_lp[:, 1]
    inter = (o_ids[:, :top_n, None] == n_ids[:, None, :top_n]).any(-1)
    replaced = top_n - inter.sum(-1)
    at_arg = o_ids == orig_argmax[:, None]
    a_idx = at_arg.argmax(-1)
    suppression = np.where(at_arg.any(-1), tracked[rows, a_idx] - o_lp[rows, a_idx], np.nan)
    at_new = o_ids == new_argmax[:, None]
    winner_rank = np.where(at_new.any(-1), at_new.argmax(-1) + 1.0, np.nan)
    n5 = min(N_TOP5, k)
    m5 = o_ids[:, :n5, None] == n_ids[:, None, :top_n]  # [P, n5, n]
    in_new = m5.any(-1)
    rank_shift = np.full((o_ids.shape[0], N_TOP5), np.nan)
    lp_shift = np.full((o_ids.shape[0], N_TOP5), np.nan)
    rank_shift[:, :n5] = np.where(in_new, np.abs(m5.argmax(-1) - np.arange(n5)[None, :]), np.nan)
    lp_shift[:, :n5] = np.where(in_new, tracked[:, :n5] - o_lp[:, :n5], np.nan)
    return {"changed": orig_argmax != new_argmax, "gap": gap.astype(np.float64), "replaced": replaced,
            "suppression": suppression.astype(np.float64), "new_winner_rank": winner_rank,
            "top5_rank_shift": rank_shift, "top5_lp_shift": lp_shift.astype(np.float64)}


def _window(block: LogitLike, max_positions: int | None) -> np.ndarray:
    pos = np.asarray(block.positions)
    keep = np.ones(pos.shape[0], dtype=bool) if max_positions is None else pos < max_positions
    return np.flatnonzero(keep)


def _iter_index(block: LogitLike, iteration: int) -> int:
    hits = np.flatnonzero(np.asarray(block.iterations) == iteration)
    if hits.size == 0:
        raise UsageError(f"question {block.question_id!r} has no iteration {iteration} recorded")
    return int(hits[0])


def final_argmax(block: LogitLike) -> np.ndarray:
    """``[P]`` emitted token per position: the argmax at the deepest recorded iteration of that position."""
    am = np.asarray(block.argmax)
    valid = am >= 0
    last = valid.shape[1] - 1 - np.argmax(valid[:, ::-1], axis=1)
    return am[np.arange(am.shape[0]), last]


def _final_index(block: LogitLike) -> np.ndarray:
    valid = np.asarray(block.argmax) >= 0
    return valid.shape[1] - 1 - np.argmax(valid[:, ::-1], axis=1)


def window_divergence(lo: LogitLike, hi: LogitLike, max_positions: int | None) -> tuple[np.ndarray, int]:
    """Common window positions ``[P]`` of two runs' logit blocks and the index into them of the first emitted-token
    disagreement (:data:`~sst_interp.kernels.outcomes.NEVER`: none in the window).

    The emitted token of a position is its argmax at the deepest recorded iteration; the comparison is
    :func:`sst_interp.kernels.outcomes.first_divergence` of the two runs' emitted tokens over the common positions.
    """
    common = np.intersect1d(lo.positions[_window(lo, max_positions)], hi.positions[_window(hi, max_positions)])
    a = final_argmax(lo)[np.searchsorted(lo.positions, common)]
    b = final_argmax(hi)[np.searchsorted(hi.positions, common)]
    return common, first_divergence(a, b)


def _frame(question_id: str, turn: int, positions: np.ndarray, cmp: dict[str, np.ndarray],
           meta: dict[str, Any]) -> pd.DataFrame:
    data: dict[str, Any] = {"question_id": question_id, "turn": turn, "position": positions.astype(np.int64)}
    data.update(meta)
    for key in ("changed", "gap", "replaced", "suppression", "new_winner_rank"):
        data[key] = cmp[key]
    for j in range(N_TOP5):
        data[f"top5_rank_shift_{j}"] = cmp["top5_rank_shift"][:, j]
        data[f"top5_lp_shift_{j}"] = cmp["top5_lp_shift"][:, j]
    return pd.DataFrame(data)


def cross_run_records(lo: LogitLike, hi: LogitLike, depth_lo: int, depth_hi: int, max_positions: int | None = 10,
                      top_n: int = 100) -> pd.DataFrame:
    """Cross-run records of one question for the run pair ``depth_lo < depth_hi`` (final iterations, clean range)."""
    common, f = window_divergence(lo, hi, max_positions)
    if f >= 0:
        common = common[: f + 1]
    if common.size == 0:
        return pd.DataFrame()
    li, hi_idx = np.searchsorted(lo.positions, common), np.searchsorted(hi.positions, common)
    lf, hf = _final_index(lo)[li], _final_index(hi)[hi_idx]
    cmp = compare_distributions(lo.top_ids[li, lf], lo.top_logprobs[li, lf], hi.top_ids[hi_idx, hf],
                                hi.top_logprobs[hi_idx, hf], lo.argmax[li, lf], hi.argmax[hi_idx, hf], top_n)
    meta = {"kind": "cross", "depth_a": depth_lo, "iter_a": depth_lo, "depth_b": depth_hi, "iter_b": depth_hi,
            "label_depth": depth_hi, "label_iter_a": 1, "label_iter_b": depth_hi}
    return _frame(lo.question_id, lo.turn, common, cmp, meta)


def within_run_records(block: LogitLike, depth: int, iter_b: int, max_positions: int | None = 10,
                       top_n: int = 100, iter_a: int = 1) -> pd.DataFrame:
    """Within-run records of one question: iteration ``iter_a`` (default 1) vs ``iter_b`` of run ``depth``."""
    rows = _window(block, max_positions)
    a, b = _iter_index(block, iter_a), _iter_index(block, iter_b)
    rows = rows[(block.argmax[rows, a] >= 0) & (block.argmax[rows, b] >= 0)]
    if rows.size == 0:
        return pd.DataFrame()
    tracked = block.tracked_logprobs[rows, b] if iter_a == 1 else None
    cmp = compare_distributions(block.top_ids[rows, a], block.top_logprobs[rows, a], block.top_ids[rows, b],
                                block.top_logprobs[rows, b], block.argmax[rows, a], block.argmax[rows, b], top_n,
                                new_lp_of_orig=tracked)
    meta = {"kind": "within", "depth_a": depth, "iter_a": iter_a, "depth_b": depth, "iter_b": iter_b,
            "label_depth": depth, "label_iter_a": iter_a, "label_iter_b": iter_b}
    return _frame(block.question_id, block.turn, np.asarray(block.positions)[rows], cmp, meta)


def trajectory_records(chain: Sequence[LogitLike], positions: np.ndarray, top_n: int = 100) -> pd.DataFrame:
    """Cross-run log-prob trajectories of tokens across three runs (a -> b -> c) at the given positions.

    Tokens are the first run's final top-n at each position that also appear in the top-K of the
    other two; ``s1`` = lp_b - lp_a, ``s2`` = lp_c - lp_b.
    """
    if len(chain) != 3:
        raise UsageError("a trajectory needs exactly three runs")
    out = []
    for p in positions:
        lps = []
        ids0 = None
        for block in chain:
            i = int(np.searchsorted(block.positions, p))
            f = _final_index(block)[i]
            ids, lp, _ = _sorted(block.top_ids[i, f][None], block.top_logprobs[i, f][None])
            if ids0 is None:
                ids0 = ids[0, :top_n]
            match = ids0[:, None] == ids[0][None, :]
            lps.append(np.where(match.any(-1), lp[0][match.argmax(-1)], np.nan))
        ok = ~np.isnan(lps[1]) & ~np.isnan(lps[2])
        out.append(pd.DataFrame({"position": int(p), "token": ids0[ok].astype(np.int64),
                                 "s1": (lps[1] - lps[0])[ok].astype(np.float64),
                                 "s2": (lps[2] - lps[1])[ok].astype(np.float64)}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=["position", "token", "s1", "s2"])


@dataclass(frozen=True)
class LogitRecords:
    """Everything the logit-dynamics tables read, collected per question.

    Args:
        records: one row per (comparison, question, position); columns described in the module docstring
            plus ``kind``, ``depth_a``, ``iter_a``, ``depth_b``, ``iter_b`` and ``low_overlap`` (nullable).
        divergence: first emitted-token disagreement per question and run pair inside the window:
            question_id, depth_a, depth_b, first_divergence (-1: none in the window).
        paths: per-iteration argmax of the deepest run: question_id, position, iteration, argmax.
        trajectories: cross-run log-prob trajectories over the three deepest runs at positions clean
            for every consecutive run pair: question_id, position, token, s1, s2, low_overlap.
        depths: the run depths; max_positions, top_n: the window and top-n used.
        labels: the regime label table (or None).
    """

    records: pd.DataFrame
    divergence: pd.DataFrame
    paths: pd.DataFrame
    trajectories: pd.DataFrame
    depths: tuple[int, ...]
    max_positions: int | None
    top_n: int
    labels: pd.DataFrame | None


def question_records(blocks: Mapping[int, LogitLike], max_positions: int | None = 10, top_n: int = 100
                     ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Records of one question from its LogitBlock at each depth: (records, divergence, paths, trajectories)."""
    depths = sorted(blocks)
    frames, div_rows = [], []
    for i, a in enumerate(depths):
        for b in depths[i + 1:]:
            frames.append(cross_run_records(blocks[a], blocks[b], a, b, max_positions, top_n))
    for d in depths:
        for j in range(2, d + 1):
            if j in set(np.asarray(blocks[d].iterations).tolist()):
                frames.append(within_run_records(blocks[d], d, j, max_positions, top_n))
    first = blocks[depths[0]]
    for a, b in zip(depths[:-1], depths[1:]):
        _, f = window_divergence(blocks[a], blocks[b], max_positions)
        div_rows.append({"question_id": first.question_id, "depth_a": a, "depth_b": b, "first_divergence": f})
    deep = blocks[depths[-1]]
    rows = _window(deep, max_positions)
    its = np.asarray(deep.iterations)
    paths = pd.DataFrame({"question_id": deep.question_id,
                          "position": np.repeat(np.asarray(deep.positions)[rows], its.size),
                          "iteration": np.tile(its, rows.size),
                          "argmax": np.asarray(deep.argmax)[rows].reshape(-1).astype(np.int64)})
    traj = pd.DataFrame(columns=["position", "token", "s1", "s2"])
    if len(depths) >= 3:
        common = None
        limit = None
        for a, b in zip(depths[:-1], depths[1:]):
            pos, f = window_divergence(blocks[a], blocks[b], max_positions)
            common = pos if common is None else np.intersect1d(common, pos)
            if f >= 0:
                limit = pos[f] if limit is None else min(limit, pos[f])
        clean = common if limit is None else common[common <= limit]
        traj = trajectory_records([blocks[d] for d in depths[-3:]], clean, top_n)
    traj.insert(0, "question_id", first.question_id)
    traj.insert(1, "turn", int(first.turn))
    nonempty = [f for f in frames if not f.empty]
    records = pd.concat(nonempty, ignore_index=True) if nonempty else pd.DataFrame()
    return records, pd.DataFrame(div_rows), paths, traj


def collect_records(run: Any, labels: pd.DataFrame | None = None, max_positions: int | None = 10,
                    top_n: int = 100, turn: int = 0, question_ids: Iterable[str] | None = None) -> LogitRecords:
    """Stream a Run's logits one question at a time and build :class:`LogitRecords` (turn ``turn`` only).

    Questions must be complete at every depth; others are skipped. ``labels`` is a regime label table
    (see :mod:`~sst_interp.analyses.logit_dynamics.regimes`).
    """
    depths = tuple(sorted(int(d) for d in run.depths))
    if question_ids is None:
        done = [set(run.question_ids(d)) for d in depths]
        question_ids = [q for q in run.question_ids(depths[0]) if all(q in s for s in done)]
    blocks_by_q = (
        {d: next(iter(run.logits(d, question_ids=[q], turn=turn)), None) for d in depths} for q in question_ids
    )
    return records_from_blocks(blocks_by_q, depths, labels, max_positions, top_n)


def records_from_blocks(per_question: Iterable[Mapping[int, LogitLike | None]], depths: Sequence[int],
                        labels: pd.DataFrame | None = None, max_positions: int | None = 10, top_n: int = 100
                        ) -> LogitRecords:
    """Build :class:`LogitRecords` from an iterable of ``{depth: LogitBlock}`` (one mapping per question)."""
    parts: list[list[pd.DataFrame]] = [[], [], [], []]
    for blocks in per_question:
        if any(b is None for b in blocks.values()) or not blocks:
            continue
        for store, frame in zip(parts, question_records(blocks, max_positions, top_n)):
            if not frame.empty:
                store.append(frame)
    records, divergence, paths, traj = (pd.concat(p, ignore_index=True) if p else pd.DataFrame() for p in parts)
    records = attach_labels(records, labels)
    if not traj.empty:
        deep = max(depths)
        traj = attach_labels(traj.assign(label_depth=deep, label_iter_a=1, label_iter_b=deep), labels)
    return LogitRecords(records, divergence, paths, traj, tuple(sorted(depths)), max_positions, top_n, labels)
