"""Question record, the questions.parquet table and id/limit selection."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from sst_interp.data.question import (
    QUESTION_COLUMNS,
    QUESTIONS_SCHEMA,
    Question,
    frame_to_questions,
    questions_to_frame,
    select_questions,
)
from sst_interp.kernels.errors import UsageError


def _questions() -> list[Question]:
    return [
        Question("q1", "gpqa", "prompt one", "B", ["x", "y", "z", "w"], {"subset": "diamond", "order": [1, 0, 2, 3]}),
        Question("q2", "gsm8k", "prompt two", "42", [], {}),
        Question("q3", "demo", "1 + 1 =", "2", [], {"family": "add"}),
    ]


def test_frame_has_exactly_the_design_columns_and_types() -> None:
    frame = questions_to_frame(_questions())
    assert list(frame.columns) == list(QUESTION_COLUMNS)
    assert list(QUESTION_COLUMNS) == ["question_id", "source", "prompt", "reference", "choices", "metadata"]
    table = pa.Table.from_pandas(frame, schema=QUESTIONS_SCHEMA, preserve_index=False)
    assert table.schema.field("choices").type == pa.list_(pa.string())
    assert table.column("choices").to_pylist() == [["x", "y", "z", "w"], [], []]
    assert json.loads(frame.loc[0, "metadata"]) == {"subset": "diamond", "order": [1, 0, 2, 3]}
    assert frame.loc[1, "metadata"] == "{}"


def test_frame_round_trips_to_questions() -> None:
    original = _questions()
    assert frame_to_questions(questions_to_frame(original)) == original


def test_frame_to_questions_names_missing_columns() -> None:
    frame = questions_to_frame(_questions()).drop(columns=["reference"])
    with pytest.raises(UsageError, match="reference"):
        frame_to_questions(frame)


def test_select_by_ids_keeps_given_order_then_limit() -> None:
    chosen = select_questions(_questions(), ids=["q3", "q1"])
    assert [q.question_id for q in chosen] == ["q3", "q1"]
    assert [q.question_id for q in select_questions(_questions(), limit=2)] == ["q1", "q2"]
    assert [q.question_id for q in select_questions(_questions(), limit=1, ids=["q2", "q1"])] == ["q2"]
    assert select_questions(_questions(), limit=0) == []


def test_select_rejects_unknown_repeated_ids_and_negative_limit() -> None:
    with pytest.raises(UsageError, match="'nope'"):
        select_questions(_questions(), ids=["q1", "nope"])
    with pytest.raises(UsageError, match="repeat"):
        select_questions(_questions(), ids=["q1", "q1"])
    with pytest.raises(UsageError, match="limit"):
        select_questions(_questions(), limit=-1)
