"""The columns the window and steer tables share: flips against the clean depth-k run with McNemar's exact p and the
flip rate's exact interval, and the clean depth-k token's log-prob change, censored questions kept as bounds: its
mean (a number, no interval), its median with the exact sign-test interval, and the sign test
(:mod:`sst_interp.experiments.intervals`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from sst_interp.experiments.intervals import (adjusted, correction_label, median_interval, rate_interval, sign_counts,
                                              sign_test)
from sst_interp.experiments.power import questions_needed
from sst_interp.experiments.tables import FLIP_POWER_COLUMN, POWER_COLUMN
from sst_interp.kernels.stats import mcnemar_exact


def flip_and_logprob_columns(broken: int, fixed: int, n: int, bounds: pd.DataFrame) -> dict[str, Any]:
    """``broken``/``fixed`` flips of ``n`` questions, their exact McNemar p (1.0 without flips) and the flip rate
    with its 95% Clopper-Pearson interval; from ``bounds`` (per question ``low``, ``high``, ``censored``, as
    :func:`~sst_interp.analyses.intervention_effect.first_token_logprob_bounds` gives): the mean change (NaN when a
    question is censored) and its bounds with censored questions at either end, with no interval (no interval of a
    mean holds its level on skewed or zero-inflated effects at these n: issue 58); the median change (NaN when
    censoring leaves it unsettled: the median of the low bounds differs from that of the high bounds) with its 95%
    exact sign-test interval, from the low bounds' lower limit to the high bounds' upper one (NaN below 6
    questions); and the exact sign test."""
    low, high = bounds["low"].to_numpy(float), bounds["high"].to_numpy(float)
    censored = int(bounds["censored"].sum()) if len(bounds) else 0
    median_low = float(np.median(low)) if len(low) else float("nan")
    median_high = float(np.median(high)) if len(high) else float("nan")
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
        # the median is monotone in every value, so the true median lies between these two; equal: it is known
        "logprob_change_median": median_high if median_low == median_high else float("nan"),
        "logprob_change_median_ci_low": median_interval(low).low,
        "logprob_change_median_ci_high": median_interval(high).high,
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
