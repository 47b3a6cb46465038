"""Loaders for the JSON-lines benchmarks: GSM8K, MATH-500 and HumanEval.

Each ``load_<name>(path, ...)`` returns ``list[Question]`` in file order; ``path`` may be the
file, a folder holding it, or None (see :mod:`sst_interp.data.files` for the lookup).

- gsm8k: ``{question, answer}``; the reference is the number after ``####`` with thousands
  commas removed; ids ``gsm8k-<split>-<row:04d>``.
- math500: ``{problem, solution, answer, subject, level, unique_id}``; the reference is ``answer``;
  ids are ``unique_id``.
- humaneval: gzipped ``{task_id, prompt, entry_point, canonical_solution, test}``; the prompt is
  the task's prompt unchanged; the reference is the check code the grader runs after the
  completion (``test`` then ``check(<entry_point>)``); ids are ``task_id``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from sst_interp.data.files import HUB_FILES, read_records, resolve_file
from sst_interp.data.prompts import gsm8k_prompt, math_prompt
from sst_interp.data.question import Question
from sst_interp.kernels.errors import UsageError

GSM8K_FORMAT = 'GSM8K JSONL with {"question", "answer"} per line, the answer ending in "#### N"'
MATH500_FORMAT = 'MATH-500 JSONL with {"problem", "solution", "answer", "subject", "level", "unique_id"} per line'
HUMANEVAL_FORMAT = 'HumanEval gzipped JSONL with {"task_id", "prompt", "entry_point", "canonical_solution", "test"}'

GSM8K_SPLITS = ("test", "train")
_FINAL_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)

PathLike = str | os.PathLike[str] | None


def gsm8k_reference(answer: str) -> str:
    """The number after ``####`` in a GSM8K answer, without thousands commas (``"#### 1,234"`` -> ``"1234"``)."""
    match = _FINAL_ANSWER.search(answer)
    if match is None:
        raise UsageError(f"GSM8K answer has no '#### N' final line: {answer[-60:]!r}")
    return match.group(1).replace(",", "").strip()


def gsm8k_file(path: PathLike = None, split: str = "test") -> Path:
    """The local GSM8K file of ``split`` (downloaded from the hub when no path or data dir is given)."""
    if split not in GSM8K_SPLITS:
        raise UsageError(f"unknown GSM8K split {split!r}; known: {list(GSM8K_SPLITS)}")
    return resolve_file("gsm8k", f"gsm8k/{split}.jsonl", path, GSM8K_FORMAT, HUB_FILES[("gsm8k", split)])


def load_gsm8k(path: PathLike = None, split: str = "test") -> list[Question]:
    """GSM8K questions of ``split`` (``test``: 1,319 rows; ``train``: 7,473 rows)."""
    file = gsm8k_file(path, split)
    records = read_records(file, GSM8K_FORMAT, ("question", "answer"))
    questions = []
    for index, record in enumerate(records):
        try:
            reference = gsm8k_reference(str(record["answer"]))
        except UsageError as err:
            raise UsageError(f"{file}: row {index + 1}: {err}; expected {GSM8K_FORMAT}") from None
        questions.append(
            Question(
                question_id=f"gsm8k-{split}-{index:04d}",
                source="gsm8k",
                prompt=gsm8k_prompt(str(record["question"])),
                reference=reference,
                choices=[],
                metadata={"split": split, "row": index, "solution": str(record["answer"])},
            )
        )
    return questions


def math500_file(path: PathLike = None) -> Path:
    """The local MATH-500 file."""
    return resolve_file("math500", "math500/test.jsonl", path, MATH500_FORMAT, HUB_FILES[("math500", "test")])


def load_math500(path: PathLike = None) -> list[Question]:
    """MATH-500 questions (500 rows); metadata keeps subject, level (int 1-5) and the reference solution."""
    file = math500_file(path)
    required = ("problem", "solution", "answer", "subject", "level", "unique_id")
    records = read_records(file, MATH500_FORMAT, required, unique="unique_id")
    levels = [_level(record["level"], file, row) for row, record in enumerate(records, start=1)]
    return [
        Question(
            question_id=str(record["unique_id"]),
            source="math500",
            prompt=math_prompt(str(record["problem"])),
            reference=str(record["answer"]),
            choices=[],
            metadata={
                "subject": str(record["subject"]),
                "level": level,
                "solution": str(record["solution"]),
            },
        )
        for record, level in zip(records, levels)
    ]


def _level(value: object, file: Path, row: int) -> int:
    """A MATH-500 ``level`` as an int (an int, or a string of digits); anything else is a UsageError."""
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit())):
        raise UsageError(f"{file}: row {row}: 'level' must be an integer (1-5), got {value!r}; expected "
                         f"{MATH500_FORMAT}")
    return int(value)


def humaneval_check_code(test: str, entry_point: str) -> str:
    """The code run after prompt + completion: the task's ``test`` (defines ``check``) then ``check(entry_point)``."""
    return f"{test.rstrip()}\n\n\ncheck({entry_point})\n"


def humaneval_file(path: PathLike = None) -> Path:
    """The local HumanEval file."""
    return resolve_file(
        "humaneval", "humaneval/HumanEval.jsonl.gz", path, HUMANEVAL_FORMAT, HUB_FILES[("humaneval", "test")]
    )


def load_humaneval(path: PathLike = None) -> list[Question]:
    """HumanEval tasks (164 rows); metadata keeps ``entry_point``, ``test`` and ``canonical_solution``."""
    file = humaneval_file(path)
    required = ("task_id", "prompt", "entry_point", "canonical_solution", "test")
    records = read_records(file, HUMANEVAL_FORMAT, required, unique="task_id")
    return [
        Question(
            question_id=str(record["task_id"]),
            source="humaneval",
            prompt=str(record["prompt"]),
            reference=humaneval_check_code(str(record["test"]), str(record["entry_point"])),
            choices=[],
            metadata={
                "entry_point": str(record["entry_point"]),
                "test": str(record["test"]),
                "canonical_solution": str(record["canonical_solution"]),
            },
        )
        for record in records
    ]
