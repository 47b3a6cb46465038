r"""CodeACT training traces from GSM8K's own solutions (paper app:dataset_format; the paper's traces are not public).

GSM8K training solutions annotate every calculation, e.g. ``Natalia sold 48/2 = <<48/2=24>>24 clips``. Each
annotation ``<<expr=value>>`` becomes one named Python line, ``stepK = expr``, in which a number equal to an earlier
step's value is replaced by that step's name (so the program computes instead of copying numbers: ``48+24`` becomes
``48 + step1``); the block ends with ``print(stepN)``. The trace is executed in the project's sandbox and kept only if
what it prints equals GSM8K's ``#### N`` (exact decimal equality, as the GSM8K grader compares). Every trace is the
exact episode string ``record --protocol codeact`` produces for a correct two-turn episode: the same first turn
(:func:`sst_interp.codeact.prompts.codeact_question`, system text included, so training and evaluation prompts are
identical), one code turn, its tool response, and a ``finish_session("The answer is N.")`` turn::

    <bos><start_of_turn>user\n{system}\n\n{question}<end_of_turn>\n<start_of_turn>model\n\n<execute>\n{code}\n</execute>
    <end_of_turn>\n<start_of_turn>user\n<tool_response>\n{output}\n</tool_response><end_of_turn>\n
    <start_of_turn>model\n\n<execute>\nfinish_session("The answer is {N}.")\n</execute><end_of_turn>

(wrapped here.) A seeded split puts about ``--val-fraction`` of the kept traces in validation. The output is
deterministic (same input and options, same bytes); ``stats.json`` beside the data says how many were kept, dropped
and why.

    python -m sst_interp.train.codeact_data --gsm8k PATH/train.jsonl --out DIR   # sst_interp.cli.codeact_data
"""

from __future__ import annotations

import io
import json
import re
import tokenize
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sst_interp.codeact.format import ActionFormat
from sst_interp.codeact.prompts import SYSTEM_TEXTS
from sst_interp.data.answers import numbers_equal
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.fields import arg
from sst_interp.kernels.paths import ensure_writable_folder
from sst_interp.outputs import write_output
from sst_interp.sandbox import PythonSession, SandboxConfig, check_backend

ANNOTATION = re.compile(r"<<([^<>=]+)=([^<>]*)>>")
FINAL = re.compile(r"####\s*(.+?)\s*$")
# What an annotation's expression may hold: numbers, arithmetic, parentheses, spaces (no names, no calls).
SAFE_EXPRESSION = re.compile(r"^[\d\s.+\-*/()%]+$")


class TraceError(ValueError):
    """A solution that cannot become a trace; the message is the drop reason (a short fixed phrase)."""


@dataclass(frozen=True)
class Trace:
    """One GSM8K row as a CodeACT trace: its code block, the printed output and the final answer."""

    index: int
    question: str
    code: str
    output: str
    answer: str

    def text(self, fmt: ActionFormat) -> str:
        """The episode string (module docstring)."""
        first = fmt.first_turn(SYSTEM_TEXTS["gsm8k"], self.question.strip())
        return (f"{first}<execute>\n{self.code}\n</execute>{fmt.tool_turn(self.output)}"
                f'<execute>\nfinish_session("The answer is {self.answer}.")\n</execute>{fmt.turn_end}')


def _numbers(expression: str) -> list[tuple[int, int, str]]:
    """(start, end, text) of every number literal in ``expression`` (Python's tokenizer)."""
    found = []
    offset = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(expression).readline):
            if token.type == tokenize.NUMBER:
                start = token.start[1]
                found.append((start + offset, token.end[1] + offset, token.string))
    except (tokenize.TokenError, IndentationError) as err:
        raise TraceError("annotation is not an expression") from err
    return found


def _same_value(literal: str, value: float) -> bool:
    try:
        return float(literal) == value
    except ValueError:
        return False


def trace_code(solution: str) -> str:
    """The Python block for a GSM8K solution (module docstring); TraceError says why there is none."""
    annotations = ANNOTATION.findall(solution)
    if not annotations:
        raise TraceError("no calculator annotation")
    lines: list[str] = []
    values: list[float] = []
    for number, (expression, _shown) in enumerate(annotations, start=1):
        expression = expression.strip()
        if not SAFE_EXPRESSION.match(expression):
            raise TraceError("annotation is not plain arithmetic")
        pieces, cursor = [], 0
        for start, end, literal in _numbers(expression):
            # The most recent earlier step with this value names it (ties: the latest, as the text reads).
            match = next((k for k in range(len(values) - 1, -1, -1) if _same_value(literal, values[k])), None)
            pieces.append(expression[cursor:start])
            pieces.append(f"step{match + 1}" if match is not None else literal)
            cursor = end
        pieces.append(expression[cursor:])
        rewritten = "".join(pieces)
        try:
            value = float(eval(compile(expression, "<annotation>", "eval"), {"__builtins__": {}}))  # noqa: S307
        except (SyntaxError, ZeroDivisionError, TypeError, ValueError, OverflowError) as err:
            raise TraceError("annotation does not evaluate") from err
        values.append(value)
        lines.append(f"step{number} = {rewritten}")
    lines.append(f"print(step{len(annotations)})")
    return "\n".join(lines)


def final_answer(solution: str) -> str:
    """GSM8K's ``#### N`` with thousands separators removed."""
    match = FINAL.search(solution.strip())
    if match is None:
        raise TraceError("no #### answer")
    return match.group(1).replace(",", "").strip()


def build_traces(rows: Sequence[dict], sandbox: object) -> tuple[list[Trace], Counter]:
    """Traces of the rows whose code, run in ``sandbox`` (a SandboxConfig), prints their answer; the Counter has
    ``kept`` and one entry per drop reason."""

    counts: Counter = Counter()
    traces: list[Trace] = []
    with PythonSession(sandbox) as session:
        for index, row in enumerate(rows):
            try:
                code = trace_code(str(row["answer"]))
                answer = final_answer(str(row["answer"]))
            except TraceError as err:
                counts[str(err)] += 1
                continue
            # Each trace starts from an empty namespace: names of earlier traces must not satisfy this one.
            session.execute("for _name in [n for n in globals() if n.startswith('step')]: del globals()[_name]")
            result = session.execute(code)
            output = result.stdout.strip()
            if result.status != "ok":
                counts[f"code {result.status}"] += 1
            elif not numbers_equal(output, answer):
                counts["printed result differs from #### answer"] += 1
            else:
                counts["kept"] += 1
                traces.append(Trace(index, str(row["question"]), code, output, answer))
    return traces, counts


def split(traces: list[Trace], val_fraction: float, seed: int) -> tuple[list[Trace], list[Trace]]:
    """A seeded split: round(val_fraction * n) traces chosen by a permutation go to validation; both keep file
    order."""
    n_val = int(round(val_fraction * len(traces)))
    chosen = set(np.random.default_rng(seed).permutation(len(traces))[:n_val].tolist())
    train = [t for i, t in enumerate(traces) if i not in chosen]
    val = [t for i, t in enumerate(traces) if i in chosen]
    return train, val


def write_jsonl(traces: Sequence[Trace], path: Path, fmt: ActionFormat) -> None:
    """One ``{"text": ..., "gsm8k_row": ...}`` object per line (the ``text`` field is what ``train`` reads)."""
    lines = [json.dumps({"text": trace.text(fmt), "gsm8k_row": trace.index}, ensure_ascii=False, sort_keys=True)
             + "\n" for trace in traces]
    write_output(path, "".join(lines))  # whole or not at all: no partial file on a full disk


def read_gsm8k(path: Path) -> list[dict]:
    """GSM8K JSONL rows with ``question`` and ``answer``."""
    if not path.is_file():
        raise UsageError(f"--gsm8k {path}: no such file; pass GSM8K's train.jsonl")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise UsageError(f"{path}, line {number}: not JSON; pass GSM8K's train.jsonl") from None
        if not isinstance(row, dict) or "question" not in row or "answer" not in row:
            raise UsageError(f"{path}, line {number}: expected an object with 'question' and 'answer' (GSM8K)")
        rows.append(row)
    return rows


@dataclass(frozen=True)
class TraceSetConfig:
    """What :func:`write_trace_set` builds, and the one declaration of the ``python -m sst_interp.train.codeact_data``
    flags (each field's default and help text; :mod:`sst_interp.cli.codeact_data` builds the parser from it)."""

    gsm8k: Path = arg(help="GSM8K train.jsonl")
    out: Path = arg(help="folder for train.jsonl, validation.jsonl, stats.json")
    val_fraction: float = arg(0.1, help="share of kept traces for validation")
    seed: int = arg(0, help="seed of the validation split")
    limit: int | None = arg(None, help="use only the first N GSM8K rows (default: all)")
    sandbox: str = arg("bwrap", choices=("bwrap", "subprocess"),
                       help="how the traces' code runs: bwrap (isolated) | subprocess (a plain child process)")

    def validate(self) -> None:
        """Check every option before anything is read or written (UsageError)."""
        if not 0.0 <= self.val_fraction < 1.0:
            raise UsageError(f"--val-fraction must be in [0, 1), got {self.val_fraction}")
        if self.limit is not None and self.limit < 1:
            raise UsageError(f"--limit must be at least 1, got {self.limit}")
        if self.out.exists() and not self.out.is_dir():
            raise UsageError(f"--out {self.out} is a file; pass a folder")
        ensure_writable_folder(self.out)


def write_trace_set(config: TraceSetConfig) -> dict:
    """Build, split and write the traces of ``config``: ``train.jsonl``, ``validation.jsonl`` and ``stats.json`` in
    ``config.out``. Returns the stats written to ``stats.json`` (bad input is a UsageError before anything is
    written)."""

    config.validate()
    sandbox = SandboxConfig(backend=config.sandbox)
    check_backend(sandbox)
    rows = read_gsm8k(config.gsm8k)[: config.limit]
    if not rows:
        raise UsageError(f"--gsm8k {config.gsm8k} holds no rows; pass GSM8K's train.jsonl")
    traces, counts = build_traces(rows, sandbox)
    train, val = split(traces, config.val_fraction, config.seed)
    config.out.mkdir(parents=True, exist_ok=True)
    fmt = ActionFormat()
    write_jsonl(train, config.out / "train.jsonl", fmt)
    write_jsonl(val, config.out / "validation.jsonl", fmt)
    stats = {"rows": len(rows), "kept": counts.pop("kept", 0), "train": len(train), "validation": len(val),
             "dropped": dict(sorted(counts.items())), "val_fraction": config.val_fraction, "seed": config.seed,
             "source": str(config.gsm8k)}
    write_output(config.out / "stats.json", json.dumps(stats, indent=2, sort_keys=True) + "\n")
    return stats
