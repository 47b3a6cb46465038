"""The columns the window and steer tables share: flips against the clean depth-k run with McNemar's exact p and the
flip rate's exact interval, and the clean depth-k token's log-prob change, censored questions kept as bounds, with
its t interval and sign test (:mod:`sst_interp.experiments.intervals`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from sst_interp.experiments.intervals import (adjusted, correction_label, mean_interval, rate_interval, sign_counts,
                                              sign_test)
from sst_interp.experiments.power import questions_needed
from sst_interp.experiments.tables import FLIP_POWER_COLUMN, POWER_COLUMN
from sst_interp.kernels.stats import mcnemar_exact


def flip_and_logprob_columns(broken: int, fixed: int, n: int, bounds: pd.DataFrame) -> dict[str, Any]:
    """``broken``/``fixed`` flips of ``n`` questions, their exact McNemar p (1.0 without flips) and the flip rate
    with its 95% Clopper-Pearson interval; from ``bounds`` (per question ``low``, ``high``, ``censored``, as
    :func:`~sst_interp.analyses.intervention_effect.first_token_logprob_bounds` gives): the mean change (NaN when a
    question is censored), the mean's bounds with censored questions at either end, a 95% Student t interval
    covering both (NaN below its minimum n or without spread) and the exact sign test."""
    low, high = bounds["low"].to_numpy(float), bounds["high"].to_numpy(float)
    censored = int(bounds["censored"].sum()) if len(bounds) else 0
    low_ci = mean_interval(low).low
    high_ci = mean_interval(high).high
    flips = rate_interval(broken + fixed, n)
    p, counted = sign_test(low, high)
    up = sign_counts(low, high)[0]
    return {
        "broken": broken, "fixed": fixed,
        "mcnemar_exact_p": float(mcnemar_exact(broken, fixed).pvalue) if broken + fixed else 1.0,
        "flip_rate_pct": 100.0 * (broken + fixed) / n if n else float("nan"),
        "flip_rate_ci_low": 100.0 * flips.low, "flip_rate_ci_high": 100.0 * flips.high,
        FLIP_POWER_COLUMN: float("nan"),
        "logprob_change_mean": float(np.mean(high)) if len(high) and not censored else float("nan"),
        "logprob_change_bound_low": float(np.mean(low)) if len(low) else float("nan"),
        "logprob_change_bound_high": float(np.mean(high)) if len(high) else float("nan"),
        "logprob_change_ci_low": low_ci, "logprob_change_ci_high": high_ci,
        "logprob_sign_p": p, "logprob_sign_n": counted, "logprob_sign_up": up, "logprob_sign_p_holm": float("nan"),
        "correction": "none (reference row)", POWER_COLUMN: float("nan"),
        "logprob_compared": int(len(bounds) - censored), "logprob_censored": censored,
    }


def holm(table: pd.DataFrame, cells: pd.Series) -> pd.DataFrame:
    """``table`` with ``logprob_sign_p_holm`` adjusted over the rows ``cells`` marks (one sweep's conditions; the
    clean reference rows are not tested) and ``correction`` naming it."""
    out = table.copy()
    mask = cells.to_numpy(bool)
    out.loc[mask, "logprob_sign_p_holm"] = adjusted(out.loc[mask, "logprob_sign_p"].to_numpy(float))
    out.loc[mask, "correction"] = correction_label(int(mask.sum()))
    return out


def planned_questions(table: pd.DataFrame, cells: pd.Series) -> pd.DataFrame:
    """``table`` with :data:`POWER_COLUMN` and :data:`FLIP_POWER_COLUMN` filled on the rows ``cells`` marks (the
    same cells as :func:`holm`): the questions the sign test would need to find each cell's observed log-prob effect
    with 80% power, and McNemar's exact test its observed flips (the sign test on the questions that flipped:
    ``fixed`` against ``broken``), planned at 0.05 / cells
    (:func:`~sst_interp.experiments.power.questions_needed`; NaN where the two directions are equal or nothing was
    counted, and on the reference rows)."""
    out = table.copy()
    mask = cells.to_numpy(bool)
    count = int(mask.sum())
    for index in out.index[mask]:
        row = out.loc[index]
        up, counted = int(row["logprob_sign_up"]), int(row["logprob_sign_n"])
        total = int(row["logprob_compared"] + row["logprob_censored"])
        out.loc[index, POWER_COLUMN] = questions_needed(up, counted - up, total, cells=count)
        out.loc[index, FLIP_POWER_COLUMN] = questions_needed(int(row["fixed"]), int(row["broken"]),
                                                             int(row["n_questions"]), cells=count)
    return out
