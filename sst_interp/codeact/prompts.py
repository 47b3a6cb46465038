r"""Zero-shot CodeACT prompts: one system text per question source, and the first turn built from a question.

Gemma 3 has no system role; as its chat template does, the system text opens the first user turn, followed by a
blank line and the task. The task is the question's own text: the completion templates of
:mod:`sst_interp.data.prompts` are stripped of their fixed header and ``Answer:``/``Solution:`` line (GPQA keeps its
lettered options; HumanEval's task is the function stub itself).

The system texts (``<execute>`` inside them is tokenised as the action token, as everywhere in the format):

demo::

    Compute the value with Python. Write code between <execute> and </execute>; you will see what it prints.
    When you know the value, run finish_session("N") with the number N.

gsm8k::

    Solve the math problem with Python. Write code between <execute> and </execute>; you will see what it prints.
    When you know the answer, run finish_session("The answer is N.") where N is a number.

gpqa::

    Answer the multiple-choice question. You may write Python between <execute> and </execute>; you will see what
    it prints. When you know the answer, run finish_session("The answer is X.") where X is the letter of the
    correct option.

math500::

    Solve the math problem with Python. Write code between <execute> and </execute>; you will see what it prints.
    When you know the answer, run finish_session("The answer is \boxed{ANSWER}.") with the final answer in LaTeX.

humaneval::

    Complete the Python function. Write the whole function between <execute> and </execute> and test it; you will
    see what it prints. When it is correct, run finish_session("done").

HumanEval is graded on the code the episode ran without error (every such block, in order; see
:mod:`sst_interp.codeact.grading`), the other sources on ``finish_session``'s argument.
"""

from __future__ import annotations

from dataclasses import replace

from sst_interp.codeact.format import ActionFormat
from sst_interp.data.prompts import GSM8K_TEMPLATE, MATH_TEMPLATE, MCQ_HEADER
from sst_interp.data.question import Question
from sst_interp.kernels.errors import UsageError

_ACT = "Write code between <execute> and </execute>; you will see what it prints."
SYSTEM_TEXTS: dict[str, str] = {
    "demo": f'Compute the value with Python. {_ACT} When you know the value, run finish_session("N") with the '
            "number N.",
    "gsm8k": f"Solve the math problem with Python. {_ACT} When you know the answer, run "
             'finish_session("The answer is N.") where N is a number.',
    "gpqa": "Answer the multiple-choice question. You may write Python between <execute> and </execute>; you will "
            'see what it prints. When you know the answer, run finish_session("The answer is X.") where X is the '
            "letter of the correct option.",
    "math500": f"Solve the math problem with Python. {_ACT} When you know the answer, run "
               'finish_session("The answer is \\boxed{ANSWER}.") with the final answer in LaTeX.',
    "humaneval": "Complete the Python function. Write the whole function between <execute> and </execute> and test "
                 'it; you will see what it prints. When it is correct, run finish_session("done").',
}


def _strip(prompt: str, head: str, tail: str, source: str) -> str:
    if not (prompt.startswith(head) and prompt.endswith(tail)):
        raise UsageError(f"a {source} prompt does not follow its completion template; rebuild the questions with "
                         "sst_interp.data.load_questions")
    return prompt[len(head): len(prompt) - len(tail)]


def task_text(question: Question) -> str:
    """The question's own text: its completion prompt without the template's fixed header and answer line."""
    source, prompt = question.source, question.prompt
    if source == "gsm8k":
        head, tail = GSM8K_TEMPLATE.split("{question}")
        return _strip(prompt, head + "", tail, source).strip()
    if source == "math500":
        head, tail = MATH_TEMPLATE.replace("{{}}", "{}").split("{problem}")
        return _strip(prompt, head, tail, source).strip()
    if source == "gpqa":
        body = _strip(prompt, MCQ_HEADER, "\nAnswer:", source)
        return body.removeprefix("Question: ").strip()
    if source in ("demo", "humaneval"):
        return prompt
    raise UsageError(f"no CodeACT prompt for source {source!r}; known: {', '.join(sorted(SYSTEM_TEXTS))}")


def codeact_question(question: Question, fmt: ActionFormat | None = None) -> Question:
    """``question`` with its prompt replaced by the first turn of a CodeACT episode (system text + task, in the chat
    format). The reference, choices and metadata are unchanged, so grading is the same."""
    fmt = fmt or ActionFormat()
    if question.source not in SYSTEM_TEXTS:
        raise UsageError(f"no CodeACT prompt for source {question.source!r}; known: {', '.join(sorted(SYSTEM_TEXTS))}")
    task = task_text(question)
    metadata = dict(question.metadata)
    if question.source == "humaneval":
        metadata["task_prompt"] = question.prompt  # the stub the tests are run after (codeact.grading)
    return replace(question, prompt=fmt.first_turn(SYSTEM_TEXTS[question.source], task), metadata=metadata)
