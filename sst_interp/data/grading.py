"""Graders: ``grade(question, completion_text) -> GradeResult``, one grader per source.

Before grading, the completion is cut at the source's first stop string
(:func:`sst_interp.data.prompts.truncate_at_stop`), so text the model produced after it
started a new question never counts.

========== ================= =====================================================================
source     grader            rule
========== ================= =====================================================================
demo       ``exact``         first integer on the first non-empty line equals the reference
gsm8k      ``gsm8k_number``  explicit ``answer is N`` / ``#### N`` else last number; exact decimal
gpqa       ``mcq_letter``    option letter (:func:`sst_interp.data.answers.extract_choice_letter`)
math500    ``math_boxed``    last ``\\boxed{}``, normalised (:mod:`sst_interp.data.math_answer`)
humaneval  ``humaneval_exec`` prompt + completion + test + ``check(entry_point)`` runs to its end in time
hops       ``hops_exact``    the whole completion (stripped) is exactly the reference digit
========== ================= =====================================================================

A :class:`Judge` (e.g. an LLM judge, as the paper uses for GSM8K, MATH-500 and GPQA) can
replace the rule-based graders for every source except HumanEval, which is always executed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from sst_interp.data.answers import extract_choice_letter, extract_leading_integer, extract_number, numbers_equal
from sst_interp.data.code_exec import DEFAULT_TIMEOUT_S, humaneval_program, run_program
from sst_interp.data.math_answer import extract_boxed_answer, math_answers_equal
from sst_interp.data.prompts import STOP_STRINGS, truncate_at_stop
from sst_interp.data.question import Question
from sst_interp.kernels.errors import UsageError
from sst_interp.sandbox import SandboxConfig


@dataclass(frozen=True)
class GradeResult:
    """The verdict on one completion.

    Args:
        extracted_answer: what the grader read as the answer (``""`` if none); for HumanEval the
            execution status (``passed``, ``failed: ...``, ``timeout after N s``).
        correct: whether it matches the reference.
        grader: the grader's name (``exact``, ``gsm8k_number``, ``mcq_letter``, ``math_boxed``,
            ``humaneval_exec``, or a judge's own name).
    """

    extracted_answer: str
    correct: bool
    grader: str


@runtime_checkable
class Judge(Protocol):
    """A pluggable grader, e.g. an LLM judge given the question, its reference and the completion."""

    def judge(self, question: Question, completion: str) -> GradeResult:
        """Grade ``completion`` (already cut at the source's stop strings) against ``question.reference``."""
        ...


def grade_exact(question: Question, completion: str) -> GradeResult:
    """Demo grader: the leading integer of the completion must equal the reference exactly."""
    answer = extract_leading_integer(completion)
    return GradeResult(answer, bool(answer) and answer == question.reference.strip(), "exact")


def grade_gsm8k(question: Question, completion: str) -> GradeResult:
    """GSM8K grader: the final number of the completion equals the reference as an exact decimal."""
    answer = extract_number(completion)
    return GradeResult(answer, numbers_equal(answer, question.reference), "gsm8k_number")


def grade_mcq(question: Question, completion: str) -> GradeResult:
    """Multiple-choice grader: the extracted option letter equals the reference letter."""
    n_choices = len(question.choices) or 4
    answer = extract_choice_letter(completion, n_choices=n_choices, choices=question.choices)
    return GradeResult(answer, bool(answer) and answer == question.reference.strip(), "mcq_letter")


def grade_math(question: Question, completion: str) -> GradeResult:
    """MATH-500 grader: the last boxed answer is equivalent to the reference after normalisation."""
    answer = extract_boxed_answer(completion)
    return GradeResult(answer, math_answers_equal(answer, question.reference), "math_boxed")


def grade_humaneval(question: Question, completion: str, timeout_s: float = DEFAULT_TIMEOUT_S,
                    sandbox: SandboxConfig | None = None) -> GradeResult:
    """HumanEval grader: run prompt + completion + the reference check code; correct iff it exits 0 in time.

    The program runs in :func:`sst_interp.sandbox.run_program`; ``sandbox`` (e.g. a CodeACT run's config)
    replaces the default bwrap sandbox with ``timeout_s``.
    """
    program = humaneval_program(question.prompt, completion, question.reference)
    result = run_program(program, timeout_s=timeout_s, sandbox=sandbox)
    return GradeResult(result.status, result.passed, "humaneval_exec")


def grade_hops(question: Question, completion: str) -> GradeResult:
    """Hops grader: the completion is exactly the answer digit (a second character, even a digit, is wrong)."""
    answer = completion.strip()
    return GradeResult(answer, answer == question.reference.strip(), "hops_exact")


GRADERS: dict[str, Callable[[Question, str], GradeResult]] = {
    "demo": grade_exact,
    "gsm8k": grade_gsm8k,
    "gpqa": grade_mcq,
    "math500": grade_math,
    "humaneval": grade_humaneval,
    "hops": grade_hops,
}
EXECUTED_SOURCES = frozenset({"humaneval"})


def grade(question: Question, completion_text: str, judge: Judge | None = None) -> GradeResult:
    """Grade ``completion_text`` (the generated text only, not the prompt) for ``question``.

    The text is first cut at the source's stop strings. With ``judge``, non-executed sources are
    graded by ``judge.judge(question, text)``; HumanEval is always executed.
    """
    grader = GRADERS.get(question.source)
    if grader is None:
        raise UsageError(f"no grader for source {question.source!r}; known: {sorted(GRADERS)}")
    text = truncate_at_stop(completion_text, question.source) if question.source in STOP_STRINGS else completion_text
    if judge is not None and question.source not in EXECUTED_SOURCES:
        return judge.judge(question, text)
    return grader(question, text)
