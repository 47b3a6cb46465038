r"""Zero-shot prompt templates and stop strings, one per question source.

The default backbone is a base model (no chat template), so every prompt is plain
text that a base model continues with the answer. ``{...}`` marks a filled field;
each template ends exactly where the model's continuation begins (no trailing space).

demo (built-in arithmetic, :mod:`sst_interp.data.demo`): the bare line, which a base
model continues with the answer::

    6 + 3 =

gsm8k::

    Solve the math problem. End with "The answer is N." where N is a number.

    Question: {question}
    Answer:

gpqa (the four options in their shuffled order, see :mod:`sst_interp.data.gpqa`)::

    Answer the multiple-choice question with the letter of the correct option.

    Question: {question}
    A) {option A}
    B) {option B}
    C) {option C}
    D) {option D}
    Answer:

math500::

    Solve the math problem. Put the final answer in \boxed{}.

    Problem: {problem}
    Solution:

humaneval: the task's own ``prompt`` unchanged (a Python signature and docstring);
the model continues with the function body.

Stop strings (:data:`STOP_STRINGS`) end generation when the model starts a new
question or, for code, a new top-level statement. The graders also cut the
completion at the first stop string, so a run that did not stop early is graded
the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from sst_interp.kernels.errors import UsageError

OPTION_LETTERS = "ABCDEFGHIJ"

DEMO_TEMPLATE = "{question}"
GSM8K_TEMPLATE = (
    'Solve the math problem. End with "The answer is N." where N is a number.\n\n' "Question: {question}\nAnswer:"
)
MCQ_HEADER = "Answer the multiple-choice question with the letter of the correct option.\n\n"
MATH_TEMPLATE = "Solve the math problem. Put the final answer in \\boxed{{}}.\n\nProblem: {problem}\nSolution:"

STOP_STRINGS: dict[str, tuple[str, ...]] = {
    "demo": ("\n",),
    "gsm8k": ("\nQuestion:",),
    "gpqa": ("\nQuestion:",),
    "math500": ("\nProblem:",),
    "hops": ("?",),  # one token is generated (MAX_NEW_TOKENS); a longer answer would end where a next query starts
    "humaneval": ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\nassert ", "\n#"),
}


def demo_prompt(question: str) -> str:
    """Prompt for one demo item: the item line itself, e.g. ``demo_prompt("6 + 3 =") == "6 + 3 ="``."""
    return DEMO_TEMPLATE.format(question=question)


def gsm8k_prompt(question: str) -> str:
    """Zero-shot GSM8K prompt (template in the module docstring)."""
    return GSM8K_TEMPLATE.format(question=question.strip())


def mcq_prompt(question: str, choices: Sequence[str]) -> str:
    """Zero-shot multiple-choice prompt listing ``choices`` as ``A) ...`` lines in the given order."""
    if not 2 <= len(choices) <= len(OPTION_LETTERS):
        raise UsageError(f"a multiple-choice question needs 2-{len(OPTION_LETTERS)} options, got {len(choices)}")
    lines = [f"{OPTION_LETTERS[i]}) {choice.strip()}" for i, choice in enumerate(choices)]
    return MCQ_HEADER + f"Question: {question.strip()}\n" + "\n".join(lines) + "\nAnswer:"


def math_prompt(problem: str) -> str:
    """Zero-shot MATH-500 prompt (template in the module docstring)."""
    return MATH_TEMPLATE.format(problem=problem.strip())


#: Default generation budget per source (``record --max-new-tokens`` overrides it): demo answers are a few
#: tokens; the benchmark sets need room for a worked solution.
MAX_NEW_TOKENS: dict[str, int] = {"hops": 1, "demo": 16, "gsm8k": 256, "gpqa": 256, "math500": 512, "humaneval": 384}


def default_max_new_tokens(source: str) -> int:
    """The default ``max_new_tokens`` for a question source (64 for a source not listed)."""
    return MAX_NEW_TOKENS.get(source, 64)


def stop_strings(source: str) -> tuple[str, ...]:
    """The stop strings for ``source``; UsageError for an unknown source."""
    try:
        return STOP_STRINGS[source]
    except KeyError:
        raise UsageError(f"no stop strings for source {source!r}; known: {sorted(STOP_STRINGS)}") from None


def truncate_at_stop(text: str, source: str) -> str:
    """``text`` up to (not including) the earliest stop string of ``source``; unchanged if none occurs."""
    cut = len(text)
    for stop in stop_strings(source):
        index = text.find(stop)
        if index != -1:
            cut = min(cut, index)
    return text[:cut]
