"""Clean run vs intervened run of the same questions: what the intervention changed.

Per depth both runs hold:

- accuracy of each, and staged capacity (a question counts when solved at some depth up to this one);
- answer flips per question: right -> wrong (``broken``) and wrong -> right (``fixed``), with the exact McNemar test
  of the two discordant counts (:func:`sst_interp.kernels.stats.mcnemar_exact`);
- the change in log-probability of the clean answer's first token at generated position 0, final iteration, turn 0:
  the clean run's argmax there, looked up in the intervened run's recorded top-K log-probs. When the token fell out
  of the intervened top-K its log-prob is only bounded above by the K-th one; such questions are counted
  (``first_token_censored``) and left out of the mean, never filled in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.kernels.results import AnalysisResult, NotApplicable
from sst_interp.kernels.stats import mcnemar_exact
from sst_interp.kernels.outcomes import correctness_matrix


@dataclass(frozen=True)
class InterventionEffect(AnalysisResult):
    """Per depth: accuracies, staged capacities, flips with McNemar's exact p, and the first-token log-prob change.

    Args:
        frame: one row per depth (columns in :meth:`table`).
        flips: one row per (question, depth) whose verdict changed: ``question_id, depth, clean, intervened``.
    """

    frame: pd.DataFrame
    flips: pd.DataFrame

    def table(self) -> pd.DataFrame:
        """``depth, n_questions, clean_accuracy_pct, intervened_accuracy_pct, clean_staged_pct,
        intervened_staged_pct, broken, fixed, mcnemar_exact_p, first_token_logprob_change_mean,
        first_token_compared, first_token_censored``."""
        return self.frame


def intervention_effect(clean: Any, intervened: Any) -> InterventionEffect | NotApplicable:
    """Compare two :class:`~sst_interp.store.Run` objects of the same questions (the intervened one second)."""
    clean_matrix, intervened_matrix = correctness_matrix(clean), correctness_matrix(intervened)
    questions = [q for q in clean_matrix.index if q in set(intervened_matrix.index)]
    depths = [d for d in clean_matrix.columns if d in set(intervened_matrix.columns)]
    if not questions or not depths:
        return NotApplicable("the clean and intervened runs share no (question, depth) with a verdict",
                             "intervention_effect")
    a = clean_matrix.loc[questions, depths].to_numpy(bool)
    b = intervened_matrix.loc[questions, depths].to_numpy(bool)
    rows, flips = [], []
    for column, depth in enumerate(depths):
        broken = int((a[:, column] & ~b[:, column]).sum())
        fixed = int((~a[:, column] & b[:, column]).sum())
        change, compared, censored = _first_token_change(clean, intervened, int(depth), questions)
        rows.append({
            "depth": int(depth), "n_questions": len(questions),
            "clean_accuracy_pct": 100.0 * a[:, column].mean(), "intervened_accuracy_pct": 100.0 * b[:, column].mean(),
            "clean_staged_pct": 100.0 * a[:, : column + 1].any(axis=1).mean(),
            "intervened_staged_pct": 100.0 * b[:, : column + 1].any(axis=1).mean(),
            # No discordant pair: nothing changed, p = 1 (the test itself needs one).
            "broken": broken, "fixed": fixed,
            "mcnemar_exact_p": float(mcnemar_exact(broken, fixed).pvalue) if broken + fixed else 1.0,
            "first_token_logprob_change_mean": change, "first_token_compared": compared,
            "first_token_censored": censored,
        })
        for row in np.flatnonzero(a[:, column] != b[:, column]):
            flips.append({"question_id": questions[row], "depth": int(depth), "clean": bool(a[row, column]),
                          "intervened": bool(b[row, column])})
    return InterventionEffect(pd.DataFrame(rows),
                              pd.DataFrame(flips, columns=["question_id", "depth", "clean", "intervened"]))


def _position0(run: Any, depth: int, questions: list[str],
               position: int = 0) -> dict[str, tuple[int, np.ndarray, np.ndarray]]:
    """{question: (final-iteration argmax, top ids [K], top log-probs [K])} at turn 0, generated ``position``."""
    out = {}
    for block in run.logits(depth, question_ids=questions, turn=0):
        where = np.flatnonzero(block.positions == position)
        if len(where) == 0:
            continue
        p = where[0]
        last = int(np.flatnonzero(block.argmax[p] >= 0).max())  # the last iteration recorded there
        out[block.question_id] = (int(block.argmax[p, last]), block.top_ids[p, last], block.top_logprobs[p, last])
    return out


def first_token_logprob_changes(clean: Any, intervened: Any, depth: int, questions: list[str],
                                intervened_depth: int | None = None, position: int = 0) -> pd.Series:
    """Per question: the intervened log-prob of the clean run's first token (turn 0, position 0, final iteration)
    minus the clean one; NaN where the token fell out of the intervened run's recorded top-K (censored).
    ``intervened_depth`` (default ``depth``) reads the intervened run at another depth, e.g. clean depth 1 against
    clean depth k. ``position`` reads another generated position's token instead of the first (its log-prob is read
    in each run's own context, which differs once an earlier token differs; questions without that position are
    absent).

    Returns:
        float Series indexed by question id (questions missing from either run are absent).
    """
    before = _position0(clean, depth, questions, position)
    after = _position0(intervened, depth if intervened_depth is None else intervened_depth, questions, position)
    out = {}
    for question, (token, ids, logprobs) in before.items():
        if question not in after:
            continue
        clean_logprob = logprobs[np.flatnonzero(ids == token)[0]]
        _, other_ids, other_logprobs = after[question]
        found = np.flatnonzero(other_ids == token)
        out[question] = float(other_logprobs[found[0]] - clean_logprob) if len(found) else float("nan")
    return pd.Series(out, dtype=float, name="first_token_logprob_change")


def _first_token_change(clean: Any, intervened: Any, depth: int, questions: list[str]) -> tuple[float, int, int]:
    changes = first_token_logprob_changes(clean, intervened, depth, questions)
    kept = changes.dropna()
    return (float(kept.mean()) if len(kept) else float("nan")), len(kept), int(changes.isna().sum())


def first_token_logprob_bounds(clean: Any, intervened: Any, depth: int, questions: list[str],
                               intervened_depth: int | None = None, position: int = 0,
                               floor: float | None = None) -> pd.DataFrame:
    """Per question, bounds on the change :func:`first_token_logprob_changes` measures, so censored questions bound
    a mean instead of leaving it: ``low == high`` where the token is in the intervened top-K; where it fell out,
    ``high`` is the intervened K-th log-prob minus the clean one (the most the token can have) and ``low`` is
    ``floor`` (default :data:`LOGPROB_FLOOR`) minus the clean one. Column ``censored`` marks those questions.

    Returns:
        DataFrame indexed by question id: ``low, high, censored``.
    """
    floor = LOGPROB_FLOOR if floor is None else float(floor)
    before = _position0(clean, depth, questions, position)
    after = _position0(intervened, depth if intervened_depth is None else intervened_depth, questions, position)
    rows = {}
    for question, (token, ids, logprobs) in before.items():
        if question not in after:
            continue
        clean_logprob = float(logprobs[np.flatnonzero(ids == token)[0]])
        _, other_ids, other_logprobs = after[question]
        found = np.flatnonzero(other_ids == token)
        if len(found):
            change = float(other_logprobs[found[0]]) - clean_logprob
            rows[question] = (change, change, False)
        else:
            rows[question] = (floor - clean_logprob, float(np.min(other_logprobs)) - clean_logprob, True)
    return pd.DataFrame.from_dict(rows, orient="index", columns=["low", "high", "censored"]).astype(
        {"low": float, "high": float, "censored": bool})


#: The lowest log-prob :func:`first_token_logprob_bounds` assumes a censored token has: the log of float32's
#: smallest positive number (a token below it has probability 0 in the float32 arithmetic the models' heads use).
LOGPROB_FLOOR: float = float(np.log(np.finfo(np.float32).smallest_subnormal))
