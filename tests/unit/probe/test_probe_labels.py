"""MUST HALT / SAFE labels against hand-computed cases (app:halting_training)."""

from __future__ import annotations

import pandas as pd
import pytest

from sst_interp.kernels.errors import UsageError
from sst_interp.probe.labels import (
    check_depths,
    correct_depths,
    labels_from_generations,
    make_labels,
    question_correctness,
)
from tests.unit.probe.planted import planted_correctness, planted_turns


def _gens(rows: list[tuple[str, int, int, bool]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["question_id", "depth", "turn", "correct"])


def test_hand_computed_labels():
    # q: pattern over flat depths 1..4 (T = pass)
    correct = pd.DataFrame(
        {
            1: [True, True, False, False, False, False],
            2: [False, True, True, True, False, False],
            3: [False, True, False, True, True, False],
            4: [False, True, False, True, False, True],
        },
        index=pd.Index(["regress1", "always", "regress2", "recover", "regress3", "late"], name="question_id"),
    )
    turns = pd.DataFrame(
        [(q, d, 0) for q in correct.index for d in range(1, 5)] + [("regress2", d, 1) for d in (1, 2)],
        columns=["question_id", "depth", "turn"],
    )
    labels = make_labels(correct, turns)
    rows = labels.timesteps[["question_id", "turn", "depth", "must_halt"]].itertuples(index=False)
    got = {(q, t, d): mh for q, t, d, mh in rows}
    expected = {
        # regress1: c=1, fails at flat 2 -> MUST HALT at 1
        ("regress1", 0, 1): True,
        # always: c=1, flat 2 passes -> SAFE at 1 (no timesteps beyond c)
        ("always", 0, 1): False,
        # regress2: c=2; d=1 SAFE (fails at 1); d=2 MUST HALT (fails at 3); two turns at depths 1 and 2
        ("regress2", 0, 1): False, ("regress2", 1, 1): False,
        ("regress2", 0, 2): True, ("regress2", 1, 2): True,
        # recover: c=2, flat 3 passes -> SAFE, SAFE
        ("recover", 0, 1): False, ("recover", 0, 2): False,
        # regress3: c=3, fails at 4 -> SAFE, SAFE, MUST HALT
        ("regress3", 0, 1): False, ("regress3", 0, 2): False, ("regress3", 0, 3): True,
        # late: c=4 = i_max -> no flat 5, all SAFE
        ("late", 0, 1): False, ("late", 0, 2): False, ("late", 0, 3): False, ("late", 0, 4): False,
    }
    assert got == expected
    assert labels.n_must_halt == 4 and labels.n_safe == 11
    assert labels.must_halt_questions == ["regress1", "regress2", "regress3"]
    assert labels.recoverable_questions == ["regress1", "always", "regress2", "recover", "regress3", "late"]
    assert list(correct_depths(correct)) == [1, 1, 2, 2, 3, 4]


def test_unrecoverable_questions_give_no_timesteps():
    correct = pd.DataFrame({1: [False], 2: [False]}, index=pd.Index(["never"], name="question_id"))
    turns = pd.DataFrame([("never", 1, 0), ("never", 2, 0)], columns=["question_id", "depth", "turn"])
    labels = make_labels(correct, turns)
    assert labels.timesteps.empty
    with pytest.raises(UsageError, match="no MUST HALT"):
        labels.require_must_halt()


def test_turn_missing_at_a_depth_has_no_timestep():
    # the second turn exists only in the depth-1 generation
    gens = _gens([("q", 1, 0, False), ("q", 1, 1, False), ("q", 2, 0, True), ("q", 3, 0, False)])
    labels = labels_from_generations(gens)
    rows = labels.timesteps[["turn", "depth", "must_halt"]].values.tolist()
    assert rows == [[0, 1, False], [0, 2, True], [1, 1, False]]


def test_question_correctness_uses_last_turn():
    gens = _gens([("a", 1, 0, True), ("a", 1, 1, False), ("a", 2, 0, False), ("a", 2, 1, True)])
    table = question_correctness(gens)
    assert table.loc["a"].tolist() == [False, True]


def test_planted_pattern_counts():
    correct = planted_correctness(2)
    labels = make_labels(correct, planted_turns(correct))
    # per pattern copy: mh1 1 (+1 second turn on even copies), mh2 2 (+2), mh3 3, alt 1, conv 1, cont 2, late 4, two 1
    assert labels.n_must_halt == 2 * 4 + 2  # mh1, mh2, mh3, alt; plus turn 1 of mh1-0 and mh2-0
    assert len(labels.must_halt_questions) == 8
    assert len(labels.recoverable_questions) == 16


@pytest.mark.parametrize("depths", [[1, 2, 4], [2, 3], []])
def test_depths_must_be_contiguous(depths):
    with pytest.raises(UsageError):
        check_depths(depths)


def test_missing_generation_is_usage_error():
    gens = _gens([("a", 1, 0, True), ("a", 2, 0, False), ("b", 1, 0, True)])
    with pytest.raises(UsageError, match="lacks a graded generation"):
        question_correctness(gens)
