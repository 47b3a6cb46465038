"""The question list: one row per question with its outcomes at every depth, and the list's filters.

Everything here comes from the run's tables (no shard is read): correctness per depth and the staged depth
(:mod:`sst_interp.kernels.outcomes`), overthinks and recoveries against the matched baseline (or, without one, against the
run's smallest flat depth, the reference of tab:overthinking), MUST HALT labels (:mod:`sst_interp.probe.labels`, only
when the run has every flat depth 1..i_max), turns and stop reasons per depth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.outcomes import NEVER, correctness_matrix, first_correct_depths, staged_depth
from sst_interp.probe.labels import make_labels
from sst_interp.store import Run

#: Values of the ``change`` filter.
CHANGES = ("any", "overthink", "recovery", "none")


@dataclass(frozen=True)
class ListFilter:
    """The question list's filters (each None: no filter).

    Args:
        search: a case-insensitive substring of the question id or its prompt.
        correct_at: ``{depth: wanted correctness}``.
        staged: the wanted staged depth (:func:`sst_interp.kernels.outcomes.staged_depth`).
        change: "overthink" (some depth fails where the reference passes), "recovery" (the reverse), "any" (either)
            or "none" (neither).
        must_halt: True: questions with a MUST HALT label; False: without.
        min_turns: at least this many model turns at some depth.
        stop_reason: this stop reason at some depth.
    """

    search: str | None = None
    correct_at: dict[int, bool] | None = None
    staged: int | None = None
    change: str | None = None
    must_halt: bool | None = None
    min_turns: int | None = None
    stop_reason: str | None = None

    def __post_init__(self) -> None:
        if self.change is not None and self.change not in CHANGES:
            raise UsageError(f"change filter must be one of {', '.join(CHANGES)}, got {self.change!r}")


def _reference(run: Run, baseline: Run | None, matrix: pd.DataFrame) -> tuple[pd.Series, str]:
    """Each question's correctness in the reference condition and the condition's name."""
    if baseline is not None:
        base = correctness_matrix(baseline)
        depth = min(base.columns) if len(base.columns) else None
        if depth is not None:
            return base[depth].reindex(matrix.index), f"baseline {baseline.path.name} (depth {depth})"
    depth = min(run.depths)
    return matrix[depth] if depth in matrix.columns else pd.Series(dtype=bool), f"flat depth {depth}"


def question_rows(run: Run, questions: pd.DataFrame, episodes: pd.DataFrame, generations: pd.DataFrame,
                  baseline: Run | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One row per question of the questions table (recorded or not yet), and facts about the list.

    Returns:
        (rows, meta). A row holds ``question_id``, ``prompt`` (its first 160 characters), ``correct``
        (``{depth: bool}`` of the recorded depths), ``staged_depth`` (None until every depth is recorded),
        ``overthinks`` / ``recoveries`` (depths), ``must_halt`` (depths), ``turns`` and ``stop_reason``
        (``{depth: ...}``). ``meta`` holds the depths, the reference condition and why MUST HALT labels are absent.
    """
    matrix = correctness_matrix(episodes.assign(turn=episodes["n_turns"] - 1)) if len(episodes) else \
        pd.DataFrame(dtype=bool)
    # staged compute tries every depth of the run in turn: its stop is known once all of them are recorded
    complete = len(matrix) > 0 and list(matrix.columns) == run.depths
    staged = staged_depth(matrix) if complete else pd.Series(dtype=np.int64)
    reference, reference_name = _reference(run, baseline, matrix) if len(matrix) else (pd.Series(dtype=bool), "")
    must_halt: dict[str, list[int]] = {}
    halt_note = ""
    if run.depths != list(range(1, max(run.depths, default=0) + 1)) or len(run.depths) < 2:
        halt_note = f"MUST HALT labels need flat depths 1..i_max (>= 2); the run has {run.depths}"
    elif complete:
        labels = make_labels(matrix, generations[generations["question_id"].isin(matrix.index)]
                             [["question_id", "depth", "turn"]])
        flagged = labels.timesteps[labels.timesteps["must_halt"]]
        for q, d in zip(flagged["question_id"], flagged["depth"]):
            must_halt.setdefault(str(q), [])
            if int(d) not in must_halt[str(q)]:
                must_halt[str(q)].append(int(d))
    first = first_correct_depths(matrix) if len(matrix) else pd.Series(dtype=np.int64)
    by_q = {q: part for q, part in episodes.groupby("question_id", sort=False)}
    prompts = dict(zip(questions["question_id"], questions["prompt"]))
    order = list(questions["question_id"]) + [q for q in by_q if q not in prompts]
    rows = []
    for q in order:
        part = by_q.get(q)
        correct = {int(d): bool(c) for d, c in zip(part["depth"], part["correct"])} if part is not None else {}
        row: dict[str, Any] = {
            "question_id": str(q),
            "prompt": str(prompts.get(q) or "")[:160],
            "correct": correct,
            "staged_depth": int(staged[q]) if q in staged.index else None,
            "first_correct_depth": int(first[q]) if q in first.index and first[q] != NEVER else None,
            "overthinks": [], "recoveries": [],
            "must_halt": sorted(must_halt.get(str(q), [])),
            "turns": {int(d): int(n) for d, n in zip(part["depth"], part["n_turns"])} if part is not None else {},
            "stop_reason": {int(d): str(s) for d, s in zip(part["depth"], part["stop_reason"])}
            if part is not None else {},
        }
        ref = reference.get(q) if len(reference) else None
        if ref is not None and not pd.isna(ref):
            row["overthinks"] = [d for d, c in sorted(correct.items()) if bool(ref) and not c]
            row["recoveries"] = [d for d, c in sorted(correct.items()) if not bool(ref) and c]
        rows.append(row)
    meta = {"depths": run.depths, "reference": reference_name, "must_halt_note": halt_note,
            "stop_reasons": sorted({s for r in rows for s in r["stop_reason"].values()}),
            "recorded": sum(1 for r in rows if r["correct"]), "total": len(rows)}
    return rows, meta


def apply_filter(rows: list[dict[str, Any]], flt: ListFilter, prompts: dict[str, str]) -> list[dict[str, Any]]:
    """The rows that pass every filter of ``flt`` (search reads the whole prompt from ``prompts``)."""
    out = []
    needle = flt.search.lower() if flt.search else None
    for row in rows:
        if needle and needle not in row["question_id"].lower() and \
                needle not in str(prompts.get(row["question_id"]) or "").lower():
            continue
        if flt.correct_at and any(row["correct"].get(d) is not want for d, want in flt.correct_at.items()):
            continue
        if flt.staged is not None and row["staged_depth"] != flt.staged:
            continue
        if flt.change is not None:
            over, rec = bool(row["overthinks"]), bool(row["recoveries"])
            keep = {"any": over or rec, "overthink": over, "recovery": rec, "none": not (over or rec)}[flt.change]
            if not keep:
                continue
        if flt.must_halt is not None and bool(row["must_halt"]) is not flt.must_halt:
            continue
        if flt.min_turns is not None and max(row["turns"].values(), default=0) < flt.min_turns:
            continue
        if flt.stop_reason is not None and flt.stop_reason not in row["stop_reason"].values():
            continue
        out.append(row)
    return out
