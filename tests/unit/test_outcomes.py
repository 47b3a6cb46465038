"""The single definitions of question outcomes (sst_interp.kernels.outcomes), and the report's tables computed through them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sst_interp.analyses import evaluation
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.outcomes import (
    NEVER,
    correctness_matrix,
    first_correct_depth,
    first_correct_depths,
    first_divergence,
    staged_capacity,
    staged_depth,
)
from sst_interp.probe.labels import correct_depths, question_correctness
from sst_interp.store import Run
from tests.unit.reporting.builders import CORRECT, write_sst_run


def _gens(rows: list[tuple[str, int, int, bool]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["question_id", "depth", "turn", "correct"])


def test_last_turn_decides_and_incomplete_questions_drop_or_raise():
    gens = _gens([("a", 1, 0, False), ("a", 1, 1, True), ("a", 2, 0, True), ("b", 2, 0, True), ("b", 1, 0, False)])
    gens = pd.concat([gens, _gens([("c", 1, 0, True)])], ignore_index=True)
    m = correctness_matrix(gens)
    assert list(m.index) == ["a", "b"] and list(m.columns) == [1, 2] and m.columns.name == "depth"
    assert m.loc["a"].tolist() == [True, True] and m.loc["b"].tolist() == [False, True]
    with pytest.raises(UsageError, match="'c' lacks a graded generation"):
        correctness_matrix(gens, require_every_depth=True)
    with pytest.raises(UsageError, match="have no generations"):
        correctness_matrix(gens, ["a", "zz"], require_every_depth=True)
    assert correctness_matrix(gens, ["b", "a"]).index.tolist() == ["b", "a"]


def test_never_is_one_value_for_every_outcome():
    correct = np.array([[False, True, True], [False, False, False], [True, False, False]])
    assert first_correct_depth([1, 2, 3], correct).tolist() == [2, NEVER, 1]
    frame = pd.DataFrame(correct, columns=[1, 2, 3], index=["a", "b", "c"])
    assert first_correct_depths(frame).tolist() == correct_depths(frame).tolist() == [2, NEVER, 1]
    assert staged_depth(frame).tolist() == [2, 3, 1]
    assert staged_capacity(frame) == {1: 1, 2: 2, 3: 2}
    assert first_divergence([1, 2, 3], [1, 2, 3]) == NEVER
    assert first_divergence([1, 2], [1, 2, 3]) == 2 and first_divergence([4, 2], [1, 2]) == 0


def test_bad_sources_are_usage_errors():
    with pytest.raises(UsageError):
        correctness_matrix(42)
    with pytest.raises(UsageError, match="lacks columns"):
        correctness_matrix(pd.DataFrame({"question_id": ["a"]}))
    with pytest.raises(UsageError, match="ungraded"):
        correctness_matrix(_gens([("a", 1, 0, None)]))


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    path = tmp_path_factory.mktemp("outcomes") / "sst"
    write_sst_run(path)
    return Run.open(path)


def test_run_episodes_generations_and_probe_agree_with_the_planted_matrix(run):
    from_run = correctness_matrix(run)
    np.testing.assert_array_equal(from_run.to_numpy(), CORRECT)
    pd.testing.assert_frame_equal(correctness_matrix(run.generations()), from_run)
    pd.testing.assert_frame_equal(question_correctness(run.generations()), from_run)


def test_report_tables_are_the_single_definitions(run):
    """tab:staged_breakdown and tab:overthinking of the report's fixed synthetic run, recomputed from outcomes."""
    matrix = correctness_matrix(run)
    n = len(matrix)
    staged = evaluation.staged_breakdown({"run": run}).table().iloc[0]
    capacity = staged_capacity(matrix)
    assert staged["N"] == n == 12
    for depth, count in capacity.items():
        assert staged[f"stage_{depth}"] == pytest.approx(100.0 * count / n)
    assert staged["capacity"] == pytest.approx(100.0 * capacity[4] / n)
    # The planted CORRECT matrix: 11 of 12 questions pass at some depth (question 5 never does).
    assert capacity == {1: 6, 2: 9, 3: 10, 4: 11}
    over = evaluation.overthinking(run).table()
    over = over[over["compared_with"] == "flat depth 1"].set_index("condition")
    values = matrix.to_numpy()
    for j, depth in enumerate(matrix.columns):
        row = over.loc[f"flat depth {depth}"]
        assert row["regressions"] == int((values[:, 0] & ~values[:, j]).sum())
        assert row["recoveries"] == int((~values[:, 0] & values[:, j]).sum())
    assert staged_depth(matrix).tolist() == [int(c) if c != NEVER else 4 for c in first_correct_depths(matrix)]
