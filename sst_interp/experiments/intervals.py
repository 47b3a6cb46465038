"""Statistics of the intervention experiments that hold their size at the few questions these runs have.

- **Small n.** No interval below :data:`MIN_INTERVAL_N` observations: with n <= 5 even an exact two-sided sign test
  cannot reach p < 0.05 (its smallest p is 2 / 2^n = 0.0625 at n = 5), and a bootstrap interval from one
  observation has width 0. From n = 6 on: a 95% BCa bootstrap interval (``scipy.stats.bootstrap``, seeded) of the
  mean, and the exact two-sided sign test (``scipy.stats.binomtest`` on the signs; zeros dropped).
- **Censoring.** A question whose token fell out of the recorded top-K is a bound ``[low, high]``
  (:func:`sst_interp.analyses.intervention_effect.first_token_logprob_bounds`), never dropped: the mean's bounds are
  the means with every censored question at its low and at its high end, and the interval runs from the low
  bound's lower limit to the high bound's upper one. The sign test counts a censored question by the sign of its
  bound where that settles it (``high < 0``: it fell), and leaves it out where it does not.
- **Many cells.** p-values across one sweep's cells (windows, scales, trace cells) are adjusted by Holm's method
  (``statsmodels.stats.multitest.multipletests``); the tables name the correction and the cell count.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

MIN_INTERVAL_N = 6
LEVEL = 0.95
CORRECTION = "holm"


def mean_interval(values: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """95% BCa bootstrap interval of the mean of ``values`` [n]; (NaN, NaN) below :data:`MIN_INTERVAL_N`; the
    value itself when every value is the same (nothing varies to resample)."""
    values = np.asarray(values, dtype=float)
    if len(values) < MIN_INTERVAL_N:
        return float("nan"), float("nan")
    if np.ptp(values) == 0:
        return float(values[0]), float(values[0])
    from scipy.stats import bootstrap

    with warnings.catch_warnings():
        # BCa warns when its jackknife is degenerate (and returns NaN): then the interval is NaN, never invented
        warnings.simplefilter("ignore")
        result = bootstrap((values,), np.mean, n_resamples=resamples, method="BCa", confidence_level=LEVEL,
                           random_state=np.random.default_rng(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def sign_counts(low: np.ndarray, high: np.ndarray) -> tuple[int, int]:
    """(up, down): questions whose bounds ``low`` <= change <= ``high`` [n] settle a rise (``low > 0``) or a fall
    (``high < 0``); the rest are left out of the sign test."""
    low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    return int((low > 0).sum()), int((high < 0).sum())


def sign_test(low: np.ndarray, high: np.ndarray) -> tuple[float, int]:
    """Exact two-sided sign test of "the change is as often up as down" over questions with bounds ``low`` <=
    change <= ``high`` [n]: a question counts as up when ``low > 0``, down when ``high < 0``, and is left out when its
    bounds do not settle the sign (or it is 0). Returns (p, questions counted); p is NaN below
    :data:`MIN_INTERVAL_N` counted."""
    up, down = sign_counts(low, high)
    n = up + down
    if n < MIN_INTERVAL_N:
        return float("nan"), n
    return float(sign_p(np.array([up]), np.array([n]))[0]), n


def sign_p(up: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Exact two-sided p [m] of ``up`` successes in ``n`` fair coin flips, elementwise: twice the smaller tail
    (the binomial(n, 1/2) is symmetric), capped at 1; equal to ``scipy.stats.binomtest(up, n, 0.5).pvalue``
    (tested). Counted in exact integers, so cheap enough to run per cell of a large map."""
    from math import comb

    out = []
    for k, total in zip(np.atleast_1d(up).tolist(), np.atleast_1d(n).tolist()):
        low = sum(comb(total, i) for i in range(0, int(k) + 1))
        high = sum(comb(total, i) for i in range(int(k), int(total) + 1))
        out.append(min(1.0, 2 * min(low, high) / 2 ** int(total)))
    return np.asarray(out, dtype=float)


def adjusted(pvalues: Sequence[float]) -> np.ndarray:
    """Holm-adjusted p-values [n] of one sweep's cells (NaN cells stay NaN and do not count towards n)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(len(p), np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        from statsmodels.stats.multitest import multipletests

        out[ok] = multipletests(p[ok], alpha=1 - LEVEL, method=CORRECTION)[1]
    return out


def correction_label(cells: int) -> str:
    """How a table names its correction, e.g. ``holm over 3 cells``."""
    return f"{CORRECTION} over {cells} cells"
