"""How often the experiments' 95% intervals hold the truth (issues 44 and 58): the data the coverage study draws,
the Monte Carlo and exact coverage of each interval of :mod:`sst_interp.experiments.intervals`, and the intervals
they replaced as negative controls (the BCa bootstrap before issue 44, Student's t of the mean before issue 58).

Declared once here, run twice: ``bench/bench_interval_coverage.py`` prints the full table (and its log is
committed), ``tests/unit/experiments/test_interval_coverage.py`` checks a slice of it on every run.

The per-question effects (what a log-prob change per question is), each with its mean and its median:

- ``normal`` N(0, 1) and ``t3`` (Student t, 3 degrees of freedom: heavy tails), symmetric, mean = median = 0;
- ``exp``: exponential(1) (skewness 2), mean 1, median ln 2;
- ``lognorm``: lognormal(0, 1), mean e^(1/2), median 1;
- ``zi-exp``: 80% exactly 0, 20% exponential(1) (zero-inflated and one-sided: most questions do not move, a few
  move a lot), mean 0.2, median 0;
- ``zi-count``: a discrete zero-inflated effect, 0, 1, 2 or 5 with probabilities (0.50, 0.25, 0.15, 0.10): ties
  everywhere and P(X <= 0) = 1/2 exactly, so every m in [0, 1] is a median; the study's truth is 0.5, and the
  sign-test interval's coverage there is the same as on continuous data (the hardest case for ties);
- ``flip``: per-question changes -1, 0, +1 with probabilities (0.15, 0.80, 0.05), mean -0.1, median 0 (issue 44's
  flip-like data: the accuracy change when few questions flip, mostly breaking).

For the count intervals (accuracy change, flip rate) and the median's interval, coverage is also computed exactly:
the counts' by summing the multinomial probability of every outcome whose interval holds the truth, the median's
from two binomial tails (:func:`exact_median`). For the t interval and the BCa bootstrap it is Monte Carlo only,
with its standard error sqrt(c (1 - c) / draws).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.stats import binom, bootstrap, multinomial, ttest_1samp

from sst_interp.experiments.intervals import LEVEL, change_intervals, median_rank, rate_intervals

#: issue 44's flip-like data: P(-1), P(0), P(+1)
FLIP_PROBS = (0.15, 0.80, 0.05)
#: the discrete zero-inflated effect: its values and their probabilities
COUNT_VALUES, COUNT_PROBS = (0.0, 1.0, 2.0, 5.0), (0.50, 0.25, 0.15, 0.10)
#: the zero-inflated exponential: the share of exact zeros
ZERO_SHARE = 0.8

Rows = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
Statistic = Literal["mean", "median"]


@dataclass(frozen=True)
class Data:
    """A distribution the coverage study draws per-question values from.

    Args:
        name: its short name (module docstring).
        mean: its mean (the truth of the mean's intervals).
        median: a median m (the truth of the median's interval).
        below: P(X < m).
        at_most: P(X <= m) (with ``below``, all :func:`exact_median` needs).
        draw: ``(rng, shape) -> values`` of that shape.
    """

    name: str
    mean: float
    median: float
    below: float
    at_most: float
    draw: Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


def _choice(values: tuple[float, ...],
            probs: tuple[float, ...]) -> Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]:
    return lambda rng, shape: rng.choice(np.array(values), size=shape, p=probs)


def _zero_inflated(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return np.where(rng.random(shape) < ZERO_SHARE, 0.0, rng.exponential(1.0, shape))


DATA = {
    "normal": Data("normal", 0.0, 0.0, 0.5, 0.5, lambda rng, shape: rng.standard_normal(shape)),
    "t3": Data("t3", 0.0, 0.0, 0.5, 0.5, lambda rng, shape: rng.standard_t(3, shape)),
    "exp": Data("exp", 1.0, float(np.log(2)), 0.5, 0.5, lambda rng, shape: rng.exponential(1.0, shape)),
    "lognorm": Data("lognorm", float(np.exp(0.5)), 1.0, 0.5, 0.5, lambda rng, shape: rng.lognormal(0.0, 1.0, shape)),
    "zi-exp": Data("zi-exp", 1 - ZERO_SHARE, 0.0, 0.0, ZERO_SHARE, _zero_inflated),
    "zi-count": Data("zi-count", float(np.dot(COUNT_VALUES, COUNT_PROBS)), 0.5, COUNT_PROBS[0], COUNT_PROBS[0],
                     _choice(COUNT_VALUES, COUNT_PROBS)),
    "flip": Data("flip", FLIP_PROBS[2] - FLIP_PROBS[0], 0.0, FLIP_PROBS[0], FLIP_PROBS[0] + FLIP_PROBS[1],
                 _choice((-1.0, 0.0, 1.0), FLIP_PROBS)),
}
#: the per-question effects a log-prob change can look like (every one but the three-point flips)
EFFECTS = ("normal", "t3", "exp", "lognorm", "zi-exp", "zi-count")


@dataclass(frozen=True)
class Coverage:
    """One cell of the coverage table.

    Args:
        coverage: share of samples whose interval holds the truth (a NaN interval counts as a miss).
        se: its Monte Carlo standard error; 0 when computed exactly.
        width: mean width of the intervals given (NaN ones left out).
        nan_share: share of samples that got no interval.
        exact: computed exactly (enumerated), not drawn (a Monte Carlo coverage of 1 has SE 0 too).
    """

    coverage: float
    se: float
    width: float
    nan_share: float
    exact: bool = False


def monte_carlo(rows: Rows, data: Data, n: int, draws: int, seed: int, statistic: Statistic = "mean") -> Coverage:
    """Coverage of ``rows`` (``[draws, n] -> (low [draws], high [draws])``) on ``draws`` samples of ``n`` values of
    ``data``, drawn with ``seed``, of the truth ``statistic`` (the data's mean or median)."""
    values = data.draw(np.random.default_rng(seed), (draws, n))
    low, high = rows(values)
    truth = data.mean if statistic == "mean" else data.median
    given = ~(np.isnan(low) | np.isnan(high))
    hit = given & (low <= truth) & (truth <= high)
    c = float(hit.mean())
    width = float((high - low)[given].mean()) if given.any() else float("nan")
    return Coverage(c, float(np.sqrt(c * (1 - c) / draws)), width, float(1 - given.mean()))


def counts_rows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The accuracy-change interval (:func:`~sst_interp.experiments.intervals.change_intervals`) of each row of
    ``values`` [draws, n] in {-1, 0, +1}."""
    return change_intervals((values > 0).sum(axis=1), (values < 0).sum(axis=1), values.shape[1])


def t_rows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The interval the tables printed for the mean log-prob change from issue 44 to issue 58, row by row: a 95%
    Student t interval of the mean of each row of ``values`` [draws, n] (``scipy.stats.ttest_1samp``), NaN where a
    row has no spread. Exact on normal data; the negative control on skewed and zero-inflated data."""
    values = np.asarray(values, dtype=float)
    flat = np.ptp(values, axis=-1) == 0
    low, high = np.full(flat.shape, np.nan), np.full(flat.shape, np.nan)
    if (~flat).any():
        # only the rows with spread: scipy warns of precision loss on the flat ones, which get NaN anyway
        ci = ttest_1samp(values[~flat], 0.0, axis=-1).confidence_interval(LEVEL)
        low[~flat], high[~flat] = ci.low, ci.high
    return low, high


def exact_median(data: Data, n: int) -> Coverage:
    """Exact coverage of the median's sign-test interval ``[X_(k), X_(n-k+1)]`` at ``n`` values of ``data``, at its
    median m. It misses only when at most k - 1 values are <= m (then X_(k) > m) or at most k - 1 are >= m (then
    X_(n-k+1) < m); the two cannot happen together (k <= n / 2), and the counts are binomial(n, P(X <= m)) and
    binomial(n, P(X >= m)), so the coverage is 1 minus the two binomial tails: exact for every distribution, ties
    included. No interval (n below the floor) counts as a miss. The width is not enumerated (NaN)."""
    k = median_rank(n)
    if k == 0:
        return Coverage(0.0, 0.0, float("nan"), 1.0, exact=True)
    miss = binom.cdf(k - 1, n, data.at_most) + binom.cdf(k - 1, n, 1 - data.below)
    return Coverage(float(1 - miss), 0.0, float("nan"), 0.0, exact=True)


def bca_rows(resamples: int, seed: int) -> Rows:
    """The interval these tables used before issue 44, row by row: a 95% BCa bootstrap of the mean
    (``scipy.stats.bootstrap``, ``resamples`` resamples, seeded), and the value itself when a row has no spread
    (as the ``mean_interval`` of issue 30 did). The negative control: the coverage test must fail it."""

    def rows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        low, high = np.empty(len(values)), np.empty(len(values))
        for i, row in enumerate(values):
            if np.ptp(row) == 0:
                low[i] = high[i] = row[0]
                continue
            with warnings.catch_warnings():
                # a degenerate jackknife makes BCa warn and return NaN; NaN is then a miss, as it was in the tables
                warnings.simplefilter("ignore")
                ci = bootstrap((row,), np.mean, n_resamples=resamples, method="BCa", confidence_level=LEVEL,
                               random_state=np.random.default_rng(seed + i)).confidence_interval
            low[i], high[i] = ci.low, ci.high
        return low, high

    return rows


def exact_change(probs: tuple[float, float, float], n: int) -> Coverage:
    """Exact coverage of the accuracy-change interval at ``n`` questions, each -1, 0, +1 with ``probs``: the
    multinomial probability of every (down, up) whose interval holds P(+1) - P(-1)."""

    down, up = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    ok = down + up <= n
    down, up = down[ok], up[ok]
    p = multinomial.pmf(np.stack([down, n - down - up, up], axis=1), n, probs)
    low, high = change_intervals(up, down, n)
    truth = probs[2] - probs[0]
    hit = (low <= truth + 1e-12) & (truth - 1e-12 <= high)
    return Coverage(float(p[hit].sum()), 0.0, float((p * (high - low)).sum()), 0.0, exact=True)


def exact_rate(rate: float, n: int) -> Coverage:
    """Exact coverage of the flip-rate (Clopper-Pearson) interval at ``n`` questions and true ``rate``."""

    k = np.arange(n + 1)
    p = binom.pmf(k, n, rate)
    low, high = rate_intervals(k, n)
    hit = (low <= rate + 1e-12) & (rate - 1e-12 <= high)
    return Coverage(float(p[hit].sum()), 0.0, float((p * (high - low)).sum()), 0.0, exact=True)


def worst_change(n: int, grid: int = 21) -> tuple[float, tuple[float, float, float]]:
    """The smallest exact coverage of the accuracy-change interval at ``n`` over a ``grid`` x ``grid`` lattice of
    (P(-1), P(+1)) with P(-1) + P(+1) <= 1, and where it is."""
    worst, where = 1.0, (0.0, 1.0, 0.0)
    for p_down in np.linspace(0, 1, grid):
        for p_up in np.linspace(0, 1 - p_down, max(2, int(round((1 - p_down) * (grid - 1))) + 1)):
            probs = (float(p_down), float(max(0.0, 1 - p_down - p_up)), float(p_up))
            c = exact_change(probs, n).coverage
            if c < worst:
                worst, where = c, probs
    return worst, where


def worst_rate(n: int, grid: int = 201) -> tuple[float, float]:
    """The smallest exact coverage of the flip-rate interval at ``n`` over ``grid`` rates in [0, 1], and where."""
    rates = np.linspace(0, 1, grid)
    values = [exact_rate(float(r), n).coverage for r in rates]
    i = int(np.argmin(values))
    return values[i], float(rates[i])
