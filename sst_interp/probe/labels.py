"""MUST HALT / SAFE labels from a run's flat-depth results (``app:halting_training``).

Definitions, exactly as the paper states them:

* A question's **correct depth** ``c`` is the staged-compute depth (``sec:capacity``): the
  smallest flat depth ``d`` in ``1..i_max`` at which the question passes. A question is
  **recoverable** when it has one (121 of 198 GPQA-Diamond questions in the paper).
* Only recoverable questions contribute timesteps. Each model turn contributes one timestep
  per iteration depth ``d = 1..c`` at which a hidden state exists (the turn was generated in
  the flat depth-``d`` generation).
* A timestep at depth ``d`` is **MUST HALT** if the question passes at staged depth ``<= d``
  (``c <= d``) and fails at flat depth ``d + 1``; **SAFE** otherwise. With ``d <= c`` this
  means ``d == c`` and the flat ``c + 1`` generation fails. At ``d = i_max`` there is no flat
  ``i_max + 1`` result, so the label is SAFE (the paper's table has no MUST HALT at iter 4).

Question-level correctness at a flat depth is the ``correct`` flag of the question's last
turn at that depth (single-turn runs: its only row).

Which hidden state each timestep reads is decided in :mod:`sst_interp.probe.dataset`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.outcomes import NEVER, correctness_matrix, first_correct_depths

TIMESTEP_COLUMNS = ["question_id", "turn", "depth", "must_halt", "correct_depth"]


def check_depths(depths: list[int] | np.ndarray) -> int:
    """Check that flat depths are exactly ``1..i_max`` and return ``i_max``."""
    depths = sorted(int(d) for d in depths)
    if not depths:
        raise UsageError("the run has no depths; record flat depths 1..i_max (e.g. --depths 1,2,3,4)")
    if depths != list(range(1, depths[-1] + 1)):
        raise UsageError(
            f"halting labels need every flat depth 1..i_max, the run has {depths}; "
            f"record the missing depths (e.g. --depths {','.join(str(d) for d in range(1, depths[-1] + 1))})"
        )
    return depths[-1]


def question_correctness(generations: pd.DataFrame, question_ids: list[str] | None = None) -> pd.DataFrame:
    """Question-level correctness per flat depth from a generations table (every question at every depth).

    :func:`sst_interp.kernels.outcomes.correctness_matrix` with ``require_every_depth``: a question missing at some depth
    is a UsageError, since a halting label needs every flat depth.

    Args:
        generations: rows with ``question_id``, ``depth``, ``turn``, ``correct`` (docs/format.md).
        question_ids: questions to keep, in this order (default: order of first appearance).

    Returns:
        DataFrame ``[questions, depths]`` of bool (index ``question_id``, columns the depths, ascending):
        the ``correct`` flag of each question's last turn at that depth.
    """
    return correctness_matrix(generations, question_ids, require_every_depth=True)


def correct_depths(correct: pd.DataFrame) -> pd.Series:
    """Staged-compute correct depth per question: the smallest passing flat depth, ``NEVER`` (-1) if none.

    ``correct: [questions, depths]`` bool (columns ``1..i_max``) -> Series of int indexed by question.
    """
    return first_correct_depths(correct)


@dataclass(frozen=True)
class HaltLabels:
    """Labelled timesteps of a run.

    Args:
        timesteps: one row per (question, turn, depth) with columns ``question_id``, ``turn``,
            ``depth`` (the iteration depth, 1-based), ``must_halt`` (bool), ``correct_depth``.
        correct: ``[questions, depths]`` bool question-level correctness at each flat depth.
        i_max: the deepest flat depth.
    """

    timesteps: pd.DataFrame
    correct: pd.DataFrame
    i_max: int

    @property
    def n_must_halt(self) -> int:
        """Number of MUST HALT timesteps (68 in the paper)."""
        return int(self.timesteps["must_halt"].sum())

    @property
    def n_safe(self) -> int:
        """Number of SAFE timesteps (289 in the paper)."""
        return int((~self.timesteps["must_halt"]).sum())

    @property
    def must_halt_questions(self) -> list[str]:
        """Questions with at least one MUST HALT timestep, in question order (48 in the paper)."""
        flagged = set(self.timesteps.loc[self.timesteps["must_halt"], "question_id"])
        return [q for q in self.correct.index if q in flagged]

    @property
    def recoverable_questions(self) -> list[str]:
        """Questions that pass at some flat depth ``<= i_max`` (121 in the paper)."""
        depth = correct_depths(self.correct)
        return [q for q in self.correct.index if depth[q] != NEVER]

    def require_must_halt(self) -> None:
        """Raise a UsageError when there is nothing to train on (no MUST HALT or no SAFE timestep)."""
        if self.n_must_halt == 0:
            raise UsageError(
                "the run has no MUST HALT timesteps (no question passes at its staged depth and fails at the "
                "next flat depth); a halting probe needs overthinking regressions to learn from"
            )
        if self.n_safe == 0:
            raise UsageError("the run has no SAFE timesteps; a halting probe needs both classes")


def make_labels(correct: pd.DataFrame, turns: pd.DataFrame) -> HaltLabels:
    """Label every timestep of the recoverable questions.

    Args:
        correct: ``[questions, depths]`` bool, columns exactly ``1..i_max`` (see :func:`question_correctness`).
        turns: rows ``question_id``, ``depth``, ``turn``: the turns generated at each flat depth
            (a run's generations table works as is).

    Returns:
        :class:`HaltLabels`; timesteps ordered by question (as in ``correct``), then turn, then depth.
    """
    i_max = check_depths(list(correct.columns))
    c = correct_depths(correct)
    values = correct.to_numpy(dtype=bool)
    row = {q: i for i, q in enumerate(correct.index)}
    turn_sets = turns.groupby(["question_id", "depth"])["turn"].apply(lambda s: sorted({int(t) for t in s}))
    records: list[tuple[str, int, int, bool, int]] = []
    for q in correct.index:
        cq = int(c[q])
        if cq == NEVER:
            continue
        per_turn: list[tuple[str, int, int, bool, int]] = []
        for d in range(1, cq + 1):
            staged_pass = cq <= d
            fails_next = d + 1 <= i_max and not values[row[q], d]  # column d is flat depth d + 1
            label = bool(staged_pass and fails_next)
            for t in turn_sets.get((q, d), []):
                per_turn.append((str(q), t, d, label, cq))
        per_turn.sort(key=lambda r: (r[1], r[2]))
        records.extend(per_turn)
    timesteps = pd.DataFrame.from_records(records, columns=TIMESTEP_COLUMNS)
    timesteps = timesteps.astype({"turn": np.int64, "depth": np.int64, "must_halt": bool, "correct_depth": np.int64})
    return HaltLabels(timesteps=timesteps, correct=correct, i_max=i_max)


def labels_from_generations(generations: pd.DataFrame, question_ids: list[str] | None = None) -> HaltLabels:
    """:func:`make_labels` straight from a generations table (docs/format.md columns)."""
    correct = question_correctness(generations, question_ids)
    keep = generations[generations["question_id"].isin(correct.index)]
    return make_labels(correct, keep[["question_id", "depth", "turn"]])
