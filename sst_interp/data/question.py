"""The :class:`Question` record every source produces, and its questions.parquet table.

The table columns are fixed by docs/format.md:
``question_id`` str, ``source`` str, ``prompt`` str, ``reference`` str,
``choices`` list<str> (empty if none), ``metadata`` str (JSON).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sst_interp.kernels.errors import UsageError
from sst_interp.store.schema import QUESTIONS_SCHEMA

if TYPE_CHECKING:  # pandas is imported by the conversion that builds a frame
    import pandas as pd

# The questions.parquet schema is part of the run-directory contract, which the store defines.
QUESTION_COLUMNS: tuple[str, ...] = tuple(QUESTIONS_SCHEMA.names)


@dataclass(frozen=True)
class Question:
    """One benchmark question, ready to be fed to a model.

    Args:
        question_id: unique id within its source (e.g. ``"HumanEval/0"``, a GPQA ``Record ID``).
        source: the source name that produced it (``demo``, ``gsm8k``, ``gpqa``, ``math500``, ``humaneval``);
            it selects the grader and the stop strings.
        prompt: the full zero-shot prompt text the model sees (templates in :mod:`sst_interp.data.prompts`).
        reference: what the grader compares against: a number, an option letter, a LaTeX answer, or the
            HumanEval check code.
        choices: the options in the order shown to the model (multiple choice only; empty otherwise).
        metadata: JSON-serialisable extras (subject, level, subset, entry point, ...).
    """

    question_id: str
    source: str
    prompt: str
    reference: str
    choices: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)


def questions_to_frame(questions: Sequence[Question]) -> pd.DataFrame:
    """The questions.parquet table: one row per question, exactly :data:`QUESTION_COLUMNS`.

    ``metadata`` is serialised as a JSON string (keys sorted, so equal questions give equal bytes).
    """
    import pandas as pd

    rows = {
        "question_id": [q.question_id for q in questions],
        "source": [q.source for q in questions],
        "prompt": [q.prompt for q in questions],
        "reference": [q.reference for q in questions],
        "choices": [list(q.choices) for q in questions],
        "metadata": [json.dumps(q.metadata, sort_keys=True, ensure_ascii=False) for q in questions],
    }
    return pd.DataFrame(rows, columns=list(QUESTION_COLUMNS))


def frame_to_questions(frame: pd.DataFrame) -> list[Question]:
    """Inverse of :func:`questions_to_frame` (e.g. to re-grade the questions of a recorded run)."""
    missing = [c for c in QUESTION_COLUMNS if c not in frame.columns]
    if missing:
        raise UsageError(f"questions table lacks columns {missing}; expected {list(QUESTION_COLUMNS)}")
    return [
        Question(
            question_id=str(row.question_id),
            source=str(row.source),
            prompt=str(row.prompt),
            reference=str(row.reference),
            choices=[str(c) for c in (row.choices if row.choices is not None else [])],
            metadata=json.loads(row.metadata) if row.metadata else {},
        )
        for row in frame.itertuples(index=False)
    ]


def select_questions(
    questions: list[Question], limit: int | None = None, ids: Sequence[str] | None = None
) -> list[Question]:
    """Keep the questions named in ``ids`` (in the order given), then the first ``limit`` of those.

    Raises UsageError for unknown or repeated ids, or a negative limit.
    """
    if ids is not None:
        by_id = {q.question_id: q for q in questions}
        unknown = [i for i in ids if i not in by_id]
        if unknown:
            shown = ", ".join(repr(i) for i in unknown[:5])
            more = f" (and {len(unknown) - 5} more)" if len(unknown) > 5 else ""
            example = questions[0].question_id if questions else "none"
            raise UsageError(f"unknown question ids {shown}{more}; ids look like {example!r}")
        if len(set(ids)) != len(ids):
            raise UsageError("question ids repeat; pass each id once")
        questions = [by_id[i] for i in ids]
    if limit is not None:
        if limit < 0:
            raise UsageError(f"limit must be >= 0, got {limit}")
        questions = questions[:limit]
    return questions
