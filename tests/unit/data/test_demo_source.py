"""The built-in demo source: deterministic, exact answers, offline."""

from __future__ import annotations

import re

import pytest

from sst_interp.data import grade, load_questions
from sst_interp.data.demo import DEFAULT_SIZE, FAMILIES, demo_items, load_demo
from sst_interp.kernels.errors import UsageError


def _solve(prompt: str) -> int:
    """Independent solution of a demo prompt, from its text alone."""
    binary = re.fullmatch(r"(\d+) ([+*]) (\d+) =", prompt)
    if binary:
        a, op, b = int(binary.group(1)), binary.group(2), int(binary.group(3))
        return a + b if op == "+" else a * b
    terms = [int(t) for t in re.fullmatch(r"((?:\d+, ){4})", prompt + " ").group(1).split(", ") if t]
    steps = {b - a for a, b in zip(terms, terms[1:])}
    assert len(steps) == 1, prompt
    return terms[-1] + steps.pop()


@pytest.mark.parametrize("level", [1, 2, 3])
def test_references_are_the_exact_answers(level: int) -> None:
    questions = load_demo(n=40, seed=3, level=level)
    assert [int(q.reference) for q in questions] == [_solve(q.prompt) for q in questions]


def test_default_set_is_deterministic_and_sized() -> None:
    first, second = load_questions("demo"), load_questions("demo")
    assert len(first) == DEFAULT_SIZE == 24
    assert first == second
    assert [q.question_id for q in first[:3]] == ["demo-000", "demo-001", "demo-002"]
    assert {q.source for q in first} == {"demo"}
    assert [q.metadata["family"] for q in first[:8]] == list(FAMILIES) * 2


def test_item_does_not_depend_on_size_and_seed_changes_items() -> None:
    assert demo_items(n=10, seed=5)[:4] == demo_items(n=4, seed=5)
    assert demo_items(n=8, seed=5) != demo_items(n=8, seed=6)


def test_level_one_operands_are_small() -> None:
    for item in demo_items(n=40, seed=0, level=1):
        if item.family in ("add", "mul"):
            a, b = (int(x) for x in re.findall(r"\d+", item.text))
            assert a <= 9 and b <= 9


def test_grader_reads_the_continuation() -> None:
    question = load_demo(n=1)[0]
    assert question.prompt == "7 + 7 =" and question.reference == "14"
    assert grade(question, " 14\n\n14").correct
    assert not grade(question, " 15\n14").correct
    assert grade(question, " 14\n").extracted_answer == "14"


def test_demo_rejects_a_data_path_and_bad_options() -> None:
    with pytest.raises(UsageError, match="built in"):
        load_questions("demo", data_path="/tmp/x")
    with pytest.raises(UsageError, match="level"):
        load_questions("demo", level=9)
    with pytest.raises(UsageError, match="size"):
        load_questions("demo", n=-1)
