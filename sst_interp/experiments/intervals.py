"""Statistics of the intervention experiments that hold their size and their coverage at the few questions these
runs have (issue 30; issue 44 for the intervals).

- **Intervals, one per statistic, chosen by their measured coverage** (``bench/bench_interval_coverage.py`` and its
  log; ``tests/unit/experiments/test_interval_coverage.py`` checks it in the suite). The BCa bootstrap the tables
  used before covered 0.85 at n = 6 for normal data and 0.61 for flip-like data, and printed ``0.0 [0.0, 0.0]``
  whenever no question flipped.

  - the **median change** (the log-prob change, one value per question): the exact sign-test interval
    ``[X_(k), X_(n-k+1)]`` of the order statistics, k from the binomial(n, 1/2) quantile (``scipy.stats.binom``;
    :func:`median_rank`). It holds for every distribution, continuous or not: the interval misses a median m only
    if at most k - 1 values are <= m or at most k - 1 are >= m, and each count is at least binomial(n, 1/2), so
    the coverage is at least 1 - 2 P(Bin(n, 1/2) <= k - 1) >= 95%, with equality (the exact level) on continuous
    data; ties only raise it. With many zeros it can be ``[0, 0]``: the middle n - 2k + 2 values are all exactly 0,
    and the interval says the median change is 0. The issue-44 choice, Student's t for the *mean*, covered 0.79-0.92 on
    skewed and zero-inflated effects at n = 6..24 (issue 58): no interval of a mean holds its level at every
    distribution at a fixed n, so the tables give the mean as a number only;
  - the **accuracy change** (per question -1, 0 or +1: broken, unchanged, fixed): an exact interval for
    Delta = q (2 pi - 1), where q is the flip rate and pi the share of flips that are fixes, from the
    Clopper-Pearson intervals of q and of pi (given the flips) at 97.5% each (``statsmodels``
    ``proportion_confint(method="beta")``); by Bonferroni the box holds both with probability >= 95%, so the
    interval's coverage is at least 95% at every n and every truth, with no flip included (then it is
    [-q_high, +q_high], never zero-width);
  - the **flip rate** (questions whose correctness changed, of n): the Clopper-Pearson exact interval; with no
    flip in n questions it is [0, 1 - 0.025^(1/n)].

  Below :data:`MIN_INTERVAL_N` observations the count intervals are NaN with their reason
  (:attr:`Interval.reason`): a proportion from one question says nearly nothing.
- **Small n for the sign test and the median.** No sign test below :data:`MIN_SIGN_N` questions of known sign:
  with n <= 5 even an exact two-sided sign test cannot reach p < 0.05 (its smallest p is 2 / 2^n = 0.0625 at
  n = 5). From n = 6 on: the exact two-sided sign test (``scipy.stats.binomtest`` on the signs; zeros dropped).
  The median's interval is that test inverted, so it has the same floor: below 6 values even [min, max] covers
  only 1 - 2 / 2^n (0.9375 at n = 5), and the interval is NaN with that reason; at n = 6 it is [min, max]
  (coverage 1 - 2/64 = 0.969).
- **Censoring.** A question whose token fell out of the recorded top-K is a bound ``[low, high]``
  (:func:`sst_interp.analyses.intervention_effect.first_token_logprob_bounds`), never dropped: the mean's bounds are
  the means with every censored question at its low and at its high end; the median's interval runs from the low
  bounds' k-th order statistic to the high bounds' (n-k+1)-th, which holds the interval the true changes would
  give (order statistics are monotone in every value). The sign test counts a censored question by the sign of its
  bound where that settles it (``high < 0``: it fell), and leaves it out where it does not.
- **Many cells.** p-values across one sweep's cells (windows, scales, trace cells) are adjusted by Holm's method
  (``statsmodels.stats.multitest.multipletests``); the tables name the correction and the cell count.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from math import comb

import numpy as np

#: the fewest observations the count intervals (accuracy change, flip rate) are given from (below: NaN with the
#: reason). The coverage study measures them at n = 2..5 as well as 6, 8, 12 and 24.
MIN_INTERVAL_N = 2
#: the fewest questions of known sign the sign test is run on (below it cannot reach p < 0.05), and the fewest values
#: the median's interval is given from (its inversion: below it even [min, max] covers under 95%;
#: :func:`median_rank` computes it, and a test holds the two equal)
MIN_SIGN_N = 6
LEVEL = 0.95
CORRECTION = "holm"

#: what each interval is, as the tables' column docs and captions name it
MEDIAN_METHOD = "exact sign-test interval of the median (order statistics at scipy.stats.binom quantiles)"
CHANGE_METHOD = ("exact: Clopper-Pearson flip rate x Clopper-Pearson share of fixes, 97.5% each "
                 "(statsmodels proportion_confint, beta)")
RATE_METHOD = "Clopper-Pearson exact (statsmodels proportion_confint, beta)"


@dataclass(frozen=True)
class Interval:
    """A 95% interval and what it is.

    Args:
        low: lower limit (NaN when none is given).
        high: upper limit (NaN when none is given).
        method: how it was computed (one of :data:`MEDIAN_METHOD`, :data:`CHANGE_METHOD`, :data:`RATE_METHOD`).
        reason: why the limits are NaN; "" when they are not.
    """

    low: float
    high: float
    method: str
    reason: str = ""

    def __iter__(self) -> Iterator[float]:  # (low, high) unpacking, as the tuple this replaced did
        return iter((self.low, self.high))


def _too_few(n: int, method: str) -> Interval | None:
    if n < MIN_INTERVAL_N:
        return Interval(float("nan"), float("nan"), method,
                        f"{n} observation{'s' if n != 1 else ''}: no interval below n = {MIN_INTERVAL_N}")
    return None


def median_rank(n: int, level: float = LEVEL) -> int:
    """The order statistic k (1-based) of the exact sign-test interval ``[X_(k), X_(n-k+1)]`` of the median of ``n``
    values: the largest k with 2 P(Bin(n, 1/2) <= k - 1) <= 1 - ``level`` (``scipy.stats.binom``), so that the
    interval covers at least ``level``. 0 when none does (n <= 5 at 95%: even [min, max] misses with probability
    2 / 2^n)."""
    from scipy.stats import binom

    if n < 1:
        return 0
    tail = (1 - level) / 2
    j = int(binom.ppf(tail, n, 0.5))  # the smallest j with P(B <= j) >= tail
    if binom.cdf(j, n, 0.5) > tail:
        j -= 1
    return max(0, j + 1)


def median_intervals(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact 95% sign-test limits of the median of each row of ``values`` [..., n] -> (low [...], high [...]): the
    k-th and (n-k+1)-th order statistics (:func:`median_rank`); NaN everywhere below :data:`MIN_SIGN_N`. The
    vectorised form of :func:`median_interval` (the coverage study runs it on thousands of samples at once)."""
    values = np.asarray(values, dtype=float)
    n = values.shape[-1]
    k = median_rank(n)
    if k == 0:
        nan = np.full(values.shape[:-1], np.nan)
        return nan, nan.copy()
    ordered = np.sort(values, axis=-1)
    return ordered[..., k - 1], ordered[..., n - k]


def median_interval(values: np.ndarray) -> Interval:
    """95% exact sign-test interval of the median of ``values`` [n] (a continuous or discrete effect per question:
    the log-prob change). Its coverage is at least 95% at every n >= :data:`MIN_SIGN_N` and every distribution,
    ties included (the module docstring says why); it may be zero-width when more than the middle values are equal
    (then the median is that value). NaN with the reason below :data:`MIN_SIGN_N`."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    if median_rank(n) == 0:
        return Interval(float("nan"), float("nan"), MEDIAN_METHOD,
                        f"{n} value{'s' if n != 1 else ''}: no 95% median interval below n = {MIN_SIGN_N} "
                        f"(even [min, max] covers only 1 - 2/2^n)")
    low, high = median_intervals(values)
    return Interval(float(low), float(high), MEDIAN_METHOD)


def rate_intervals(count: np.ndarray, n: int | np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Clopper-Pearson limits of the proportion ``count`` / ``n`` (elementwise) at ``level``."""
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(np.asarray(count), np.asarray(n), alpha=1 - level, method="beta")
    return np.asarray(low, dtype=float), np.asarray(high, dtype=float)


def rate_interval(count: int, n: int) -> Interval:
    """95% Clopper-Pearson interval of the rate ``count`` of ``n`` (the flip rate: questions whose correctness
    changed). Exact: its coverage is at least 95% at every n and rate; with ``count = 0`` it is
    [0, 1 - 0.025^(1/n)]. NaN with the reason below :data:`MIN_INTERVAL_N`."""
    refused = _too_few(n, RATE_METHOD)
    if refused is not None:
        return refused
    low, high = rate_intervals(np.array([count]), n)
    return Interval(float(low[0]), float(high[0]), RATE_METHOD)


def change_intervals(up: np.ndarray, down: np.ndarray, n: int | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact limits of the mean of per-question values in {-1, 0, +1} with ``up`` +1s and ``down`` -1s of ``n``
    (elementwise; :func:`change_interval` says how)."""
    up, down, n = np.asarray(up), np.asarray(down), np.asarray(n)
    flips = up + down
    # each of the two at 97.5%, so that both hold together with probability >= 95% (Bonferroni)
    half = 1 - (1 - LEVEL) / 2
    q_low, q_high = rate_intervals(flips, n, half)
    safe = np.maximum(flips, 1)  # with no flip the share of fixes is unconstrained: [0, 1]
    pi_low, pi_high = rate_intervals(up, safe, half)
    pi_low, pi_high = np.where(flips == 0, 0.0, pi_low), np.where(flips == 0, 1.0, pi_high)
    # Delta = q (2 pi - 1) is monotone in pi and linear in q: its extremes over the box are at corners
    lo_slope, hi_slope = 2 * pi_low - 1, 2 * pi_high - 1
    low = np.where(lo_slope >= 0, q_low * lo_slope, q_high * lo_slope)
    high = np.where(hi_slope >= 0, q_high * hi_slope, q_low * hi_slope)
    return low, high


def change_interval(values: np.ndarray) -> Interval:
    """95% exact interval of the mean of ``values`` [n], each -1, 0 or +1 (the accuracy change per question:
    broken, unchanged, fixed). The mean is Delta = q (2 pi - 1) with q the flip rate and pi the share of flips
    that are fixes; the interval is Delta's range over the box of q's and pi's Clopper-Pearson intervals at 97.5%
    each. Both hold together with probability >= 95% at every n and truth (Bonferroni), so the interval covers
    at least 95% of the time, and with no flip it is [-q_high, q_high], not a point. NaN with the reason below
    :data:`MIN_INTERVAL_N`.

    Raises:
        ValueError: a value is not -1, 0 or +1.
    """
    values = np.asarray(values, dtype=float)
    if not np.isin(values, (-1.0, 0.0, 1.0)).all():
        raise ValueError("change_interval takes per-question changes of -1, 0 or +1 (broken, unchanged, fixed)")
    refused = _too_few(len(values), CHANGE_METHOD)
    if refused is not None:
        return refused
    low, high = change_intervals(np.array([(values > 0).sum()]), np.array([(values < 0).sum()]), len(values))
    return Interval(float(low[0]), float(high[0]), CHANGE_METHOD)


def sign_counts(low: np.ndarray, high: np.ndarray) -> tuple[int, int]:
    """(up, down): questions whose bounds ``low`` <= change <= ``high`` [n] settle a rise (``low > 0``) or a fall
    (``high < 0``); the rest are left out of the sign test."""
    low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    return int((low > 0).sum()), int((high < 0).sum())


def sign_test(low: np.ndarray, high: np.ndarray) -> tuple[float, int]:
    """Exact two-sided sign test of "the change is as often up as down" over questions with bounds ``low`` <=
    change <= ``high`` [n]: a question counts as up when ``low > 0``, down when ``high < 0``, and is left out when its
    bounds do not settle the sign (or it is 0). Returns (p, questions counted); p is NaN below
    :data:`MIN_SIGN_N` counted."""
    up, down = sign_counts(low, high)
    n = up + down
    if n < MIN_SIGN_N:
        return float("nan"), n
    return float(sign_p(np.array([up]), np.array([n]))[0]), n


def sign_p(up: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Exact two-sided p [m] of ``up`` successes in ``n`` fair coin flips, elementwise: twice the smaller tail
    (the binomial(n, 1/2) is symmetric), capped at 1; equal to ``scipy.stats.binomtest(up, n, 0.5).pvalue``
    (tested). Counted in exact integers, so cheap enough to run per cell of a large map."""
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
