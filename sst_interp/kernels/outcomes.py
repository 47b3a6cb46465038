"""Question outcomes, defined once: correctness per depth, staged compute, first correct depth, first divergence.

Used by the analyses, the halting probe, ``record``'s summary and the report, so that they cannot disagree. It lives
at the package root (not in :mod:`sst_interp.analyses`) because ``record`` and ``probe`` need it and must not depend
on the analyses for it; it imports numpy and pandas only.

Definitions (paper sec:evaluation, sec:capacity):

* **Correctness** belongs to the episode: one row per (question, depth) (a completion, or a CodeACT episode of
  several model turns). A :class:`~sst_interp.store.Run` gives its ``episodes()``; a generations table (one row per
  model turn) gives the ``correct`` flag of each question's last turn at each depth, since every turn row of an
  episode repeats the episode's verdict.
* **Staged compute**: a question is tried at flat depth 1, then 2, ...; it passes at staged depth ``d`` when it is
  correct at some flat depth ``<= d``. Under greedy decoding the depth-``d`` attempt is the flat depth-``d``
  generation, so staged outcomes are computed from the flat runs.
* **First correct depth** (the staged-compute "correct depth"): the smallest flat depth at which a question is
  correct, or :data:`NEVER` when there is none. **Staged depth**: where staged compute stops, the first correct
  depth, else the deepest depth tried.
* **First divergence** of two token traces: the first position where they differ; the shorter length when one is
  a prefix of the other; :data:`NEVER` when they are identical.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.kernels.errors import UsageError

#: The one "never" value: no depth is correct (first correct depth), the traces never differ (first divergence).
#: Depths and positions are never negative, so -1 cannot be mistaken for one.
NEVER = -1

#: Columns a generations (or episodes-as-turns) table needs for correctness.
CORRECTNESS_COLUMNS = ("question_id", "depth", "turn", "correct")


def outcome_rows(source: Any) -> pd.DataFrame:
    """The rows correctness is read from: a Run's episodes (as last turns), or a generations DataFrame as it is.

    Raises UsageError for anything else, for a table lacking :data:`CORRECTNESS_COLUMNS` and for ungraded rows.
    """
    if isinstance(source, pd.DataFrame):
        rows = source
    elif hasattr(source, "episodes"):
        episodes = source.episodes()
        # An episode of n model turns ends at turn n - 1; its row carries the episode's verdict.
        rows = episodes.assign(turn=episodes["n_turns"] - 1)
    else:
        raise UsageError(f"expected a generations DataFrame or a Run, got {type(source).__name__}")
    missing = [c for c in CORRECTNESS_COLUMNS if c not in rows.columns]
    if missing:
        raise UsageError(f"generations table lacks columns {missing}; it must have the columns docs/format.md lists")
    if rows["correct"].isna().any():
        raise UsageError("generations table has ungraded rows (correct is null); grade the run first")
    return rows


def correctness_matrix(source: Any, question_ids: Sequence[str] | None = None, *,
                       require_every_depth: bool = False) -> pd.DataFrame:
    """Per-question correctness at each depth: the ``correct`` verdict of each (question, depth) episode.

    Args:
        source: a :class:`~sst_interp.store.Run` (its ``episodes()``) or a generations table (``question_id``,
            ``depth``, ``turn``, ``correct``; the last turn of each question and depth decides).
        question_ids: the questions to keep, in this order (default: every question, in first-seen order).
        require_every_depth: False (the analyses): questions missing at some depth are dropped, so that only
            questions recorded at every depth enter. True (the halting probe): such a question, or one of
            ``question_ids`` with no row at all, is a UsageError naming it.

    Returns:
        bool DataFrame ``[questions, depths]``: index ``question_id``, columns the depths (ints, ascending, named
        ``depth``). Empty when the source has no rows.
    """
    rows = outcome_rows(source)
    if rows.empty and not (require_every_depth and question_ids):
        return pd.DataFrame(dtype=bool)
    last = rows.sort_values("turn", kind="stable").groupby(["question_id", "depth"], sort=False).tail(1)
    wide = last.pivot(index="question_id", columns="depth", values="correct")
    order = list(pd.unique(rows["question_id"])) if question_ids is None else list(question_ids)
    if require_every_depth:
        absent = [q for q in order if q not in wide.index]
        if absent:
            raise UsageError(f"{len(absent)} questions have no generations (first: {absent[0]!r}); record them first")
        wide = wide.loc[order]
        if wide.isna().any().any():
            q = wide.index[wide.isna().any(axis=1)][0]
            raise UsageError(f"question {q!r} lacks a graded generation at some depth; record every depth for it")
    else:
        wide = wide.reindex([q for q in order if q in wide.index]).dropna(axis=0, how="any")
    wide = wide[sorted(wide.columns)].astype(bool)
    wide.columns = pd.Index([int(c) for c in wide.columns], name="depth")
    return wide


def staged_correct(matrix: pd.DataFrame) -> pd.DataFrame:
    """Staged-compute correctness: ``[questions, depths]`` bool, correct at some depth ``<=`` each column's."""
    return matrix.cummax(axis=1).astype(bool)


def staged_capacity(matrix: pd.DataFrame) -> dict[int, int]:
    """Questions solved through each stage: ``{depth: count correct at some depth <= depth}`` (ascending)."""
    solved = staged_correct(matrix[sorted(matrix.columns)]).sum(axis=0)
    return {int(d): int(n) for d, n in solved.items()}


def first_correct_depth(depths: Sequence[int], correct: np.ndarray) -> np.ndarray:
    """``[Q]`` int64: the smallest of ``depths`` at which each question is correct, :data:`NEVER` when none.

    ``correct: [Q, len(depths)]`` bool, columns in the order of ``depths`` (ascending).
    """
    correct = np.asarray(correct, dtype=bool)
    first = correct.argmax(axis=1)
    return np.where(correct.any(axis=1), np.asarray(depths, dtype=np.int64)[first], NEVER).astype(np.int64)


def first_correct_depths(matrix: pd.DataFrame) -> pd.Series:
    """:func:`first_correct_depth` of a correctness matrix, as an int Series named ``correct_depth``."""
    first = first_correct_depth(list(matrix.columns), matrix.to_numpy(dtype=bool))
    return pd.Series(first, index=matrix.index, name="correct_depth")


def staged_depth(matrix: pd.DataFrame) -> pd.Series:
    """Depth at which staged compute stops per question: its first correct depth, else the deepest depth."""
    first = first_correct_depths(matrix)
    deepest = int(max(matrix.columns))
    return first.where(first != NEVER, deepest).astype(np.int64).rename("staged_depth")


def first_divergence(tokens_a: Sequence[int] | np.ndarray, tokens_b: Sequence[int] | np.ndarray) -> int:
    """First position where two token traces differ; the shorter length if one is a prefix; :data:`NEVER` if equal."""
    a = np.asarray(tokens_a)
    b = np.asarray(tokens_b)
    n = min(a.size, b.size)
    diff = np.flatnonzero(a[:n] != b[:n])
    if diff.size:
        return int(diff[0])
    return NEVER if a.size == b.size else n
