"""Rule-based graders on hand-made completions, and the Judge hook."""

from __future__ import annotations

from pathlib import Path

import pytest

from sst_interp.data import GradeResult, Judge, Question, grade, load_questions
from sst_interp.data.answers import extract_choice_letter, extract_number, normalise_number
from sst_interp.data.math_answer import extract_boxed_answer, math_answers_equal, normalise_math_answer
from sst_interp.kernels.errors import UsageError

MCQ = Question("m1", "gpqa", "prompt", "C", ["red", "blue", "green light", "white"], {})


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        (" The answer is (C)", "C"),
        (" C) green light", "C"),
        (" **C**", "C"),
        (" C", "C"),
        (" (C)\n", "C"),
        (" C. Because it is green.", "C"),
        ("Let me think. B looks tempting, but the correct answer is: D.", "D"),
        ("Answer: **B**", "B"),
        (" A good question. Blue is a colour.", ""),
        (" A\n", "A"),
        (" I would pick (B) here.", "B"),
        (" green light", "C"),
        (" nothing useful", ""),
        (" E) none", ""),
        (" the answer is c", ""),
    ],
)
def test_choice_letter_extraction(text: str, letter: str) -> None:
    assert extract_choice_letter(text, n_choices=4, choices=MCQ.choices) == letter


def test_mcq_grade_and_stop_truncation() -> None:
    assert grade(MCQ, " The answer is (C)") == GradeResult("C", True, "mcq_letter")
    assert grade(MCQ, " B)") == GradeResult("B", False, "mcq_letter")
    # text after the model starts a new question is cut away before grading
    assert grade(MCQ, " B\nQuestion: another\nThe answer is (C)").extracted_answer == "B"
    assert grade(MCQ, " unsure") == GradeResult("", False, "mcq_letter")


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("She sells 9 eggs for $2 each, so 9 * 2 = 18.", "18"),
        ("The answer is 1,234 apples. Check: 1,000 + 234 = 1,234", "1234"),
        ("The answer is -5.", "-5"),
        ("It drops 8 degrees: 3 - 8 = \u22125", "-5"),
        ("The answer is $18.00.", "18"),
        ("#### 72\nThen 5 more lines 3 4", "72"),
        ("x is 2.5 then 10-3 = 7", "7"),
        ("the answer is 0.50", "0.5"),
        ("no digits here", ""),
        ("Answer: 42. Later we compute 3 + 4 = 7", "42"),
    ],
)
def test_gsm8k_number_extraction(text: str, number: str) -> None:
    assert extract_number(text) == number


def test_gsm8k_grade_compares_exact_decimals() -> None:
    question = Question("g1", "gsm8k", "p", "1234", [], {})
    assert grade(question, "So the total is 1,234.0") == GradeResult("1234", True, "gsm8k_number")
    assert not grade(question, "The answer is 1233").correct
    assert not grade(question, "The answer is 1234.5").correct
    negative = Question("g2", "gsm8k", "p", "-5", [], {})
    assert grade(negative, "The answer is -5").correct
    assert not grade(negative, "The answer is 5").correct
    assert normalise_number("1,000,000") == "1000000" and normalise_number("abc") == ""


@pytest.mark.parametrize(
    ("text", "boxed"),
    [
        ("so $x = \\boxed{5}$.", "5"),
        (
            "\\boxed{\\frac{1}{2}} and then \\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}",
            "\\left( 3, \\frac{\\pi}{2} \\right)",
        ),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("final: \\boxed 7", "7"),
        ("\\fbox{x^{2}}", "x^{2}"),
        ("Thus the answer is $12$.", "12"),
        ("no answer", ""),
        ("\\boxed{unbalanced", ""),
    ],
)
def test_boxed_extraction(text: str, boxed: str) -> None:
    assert extract_boxed_answer(text) == boxed


@pytest.mark.parametrize(
    ("candidate", "reference", "equal"),
    [
        ("\\dfrac{3}{4}", "\\frac{3}{4}", True),
        ("\\frac34", "\\frac{3}{4}", True),
        ("0.75", "\\frac{3}{4}", True),
        ("3/4", "\\frac{3}{4}", True),
        ("-\\frac{1}{2}", "-0.5", True),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "\\left( 3, \\frac{\\pi}{2} \\right)", True),
        ("(3,\\frac{\\pi}{2})", "\\left( 3, \\frac{\\pi}{2} \\right)", True),
        ("5.0", "5", True),
        ("x = 5", "5", True),
        ("\\text{(C)}", "(C)", True),
        ("10,000", "10000", True),
        ("30^\\circ", "30", True),
        ("50\\%", "50", True),
        ("\\sqrt2", "\\sqrt{2}", True),
        ("\\frac{3}{5}", "\\frac{3}{4}", False),
        ("4", "5", False),
        ("", "", False),
        ("(3, 5)", "(5, 3)", False),
    ],
)
def test_math_equivalence(candidate: str, reference: str, equal: bool) -> None:
    assert math_answers_equal(candidate, reference) is equal


def test_math_normalisation_steps() -> None:
    assert normalise_math_answer("\\text{Evelyn}") == "Evelyn"
    assert normalise_math_answer("\\dfrac{\\sqrt{3}}{2}") == "\\frac{\\sqrt{3}}{2}"
    assert normalise_math_answer(" .5 ") == "0.5"
    question = Question("t", "math500", "p", "\\frac{\\pi}{2}", [], {})
    assert grade(question, "Hence \\boxed{\\dfrac{\\pi}{2}}.") == GradeResult("\\dfrac{\\pi}{2}", True, "math_boxed")
    assert not grade(question, "Hence \\boxed{\\pi}.").correct


class _FakeJudge:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def judge(self, question: Question, completion: str) -> GradeResult:
        self.seen.append((question.question_id, completion))
        return GradeResult("judged", True, "fake_judge")


def test_judge_replaces_rule_graders_except_execution() -> None:
    judge = _FakeJudge()
    assert isinstance(judge, Judge)
    assert grade(MCQ, " B\nQuestion: next", judge=judge) == GradeResult("judged", True, "fake_judge")
    assert judge.seen == [("m1", " B")]
    code = Question("c", "humaneval", "def f():\n", "assert f() == 1\n", [], {})
    result = grade(code, "    return 2\n", judge=judge)
    assert result.grader == "humaneval_exec" and not result.correct
    assert len(judge.seen) == 1


def test_unknown_source_has_no_grader() -> None:
    with pytest.raises(UsageError, match="no grader"):
        grade(Question("x", "mmlu", "p", "A", [], {}), "A")


def test_real_reference_solutions_grade_correct(shared_data: Path) -> None:
    gsm8k = load_questions("gsm8k", shared_data)
    assert sum(grade(q, q.metadata["solution"]).correct for q in gsm8k) == 1319
    math500 = load_questions("math500", shared_data)
    assert sum(grade(q, q.metadata["solution"]).correct for q in math500) == 500
    # shifting every reference answer by one breaks every numeric match
    assert not any(grade(q, f"The answer is {int(q.reference) + 1}").correct for q in gsm8k[:50])


def test_fixture_reference_solutions_grade_correct(benchmark_fixtures: Path) -> None:
    """The same check on the real first rows kept in the repository (runs in a fresh clone)."""
    gsm8k = load_questions("gsm8k", benchmark_fixtures)
    math500 = load_questions("math500", benchmark_fixtures)
    assert (len(gsm8k), len(math500)) == (32, 24)
    assert all(grade(q, q.metadata["solution"]).correct for q in gsm8k + math500)
    assert not any(grade(q, f"The answer is {int(q.reference) + 1}").correct for q in gsm8k)
