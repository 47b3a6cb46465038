"""How often the experiments' 95% intervals hold the truth (issue 44): the data the coverage study draws, the Monte
Carlo and exact coverage of each interval of :mod:`sst_interp.experiments.intervals`, and the BCa bootstrap they
replaced as the negative control.

Declared once here, run twice: ``bench/bench_interval_coverage.py`` prints the full table (and its log is
committed), ``tests/unit/experiments/test_interval_coverage.py`` checks a small slice of it on every run.

- Continuous data (what a log-prob change per question is): ``normal`` N(0, 1) and ``t3`` (Student t, 3 degrees
  of freedom: heavy tails), truth 0.
- ``flip``: per-question changes -1, 0, +1 with probabilities (0.15, 0.80, 0.05), truth -0.1 (issue 44's
  flip-like data: the accuracy change when few questions flip, mostly breaking).

For the count intervals (accuracy change, flip rate) coverage is computed exactly, by summing the multinomial
probability of every outcome whose interval holds the truth: no Monte Carlo error. For the t interval and the BCa
bootstrap it is Monte Carlo, with its standard error sqrt(c (1 - c) / draws).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom, bootstrap, multinomial

from sst_interp.experiments.intervals import LEVEL, change_intervals, rate_intervals

#: issue 44's flip-like data: P(-1), P(0), P(+1)
FLIP_PROBS = (0.15, 0.80, 0.05)

Rows = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Data:
    """A distribution the coverage study draws per-question values from.

    Args:
        name: normal, t3 or flip.
        truth: its mean.
        draw: ``(rng, shape) -> values`` of that shape.
    """

    name: str
    truth: float
    draw: Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


def _flip(probs: tuple[float, float, float]) -> Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]:
    return lambda rng, shape: rng.choice(np.array([-1.0, 0.0, 1.0]), size=shape, p=probs)


DATA = {
    "normal": Data("normal", 0.0, lambda rng, shape: rng.standard_normal(shape)),
    "t3": Data("t3", 0.0, lambda rng, shape: rng.standard_t(3, shape)),
    "flip": Data("flip", FLIP_PROBS[2] - FLIP_PROBS[0], _flip(FLIP_PROBS)),
}


@dataclass(frozen=True)
class Coverage:
    """One cell of the coverage table.

    Args:
        coverage: share of samples whose interval holds the truth (a NaN interval counts as a miss).
        se: its Monte Carlo standard error; 0 when computed exactly.
        width: mean width of the intervals given (NaN ones left out).
        nan_share: share of samples that got no interval.
    """

    coverage: float
    se: float
    width: float
    nan_share: float


def monte_carlo(rows: Rows, data: Data, n: int, draws: int, seed: int) -> Coverage:
    """Coverage of ``rows`` (``[draws, n] -> (low [draws], high [draws])``) on ``draws`` samples of ``n`` values of
    ``data``, drawn with ``seed``."""
    values = data.draw(np.random.default_rng(seed), (draws, n))
    low, high = rows(values)
    given = ~(np.isnan(low) | np.isnan(high))
    hit = given & (low <= data.truth) & (data.truth <= high)
    c = float(hit.mean())
    width = float((high - low)[given].mean()) if given.any() else float("nan")
    return Coverage(c, float(np.sqrt(c * (1 - c) / draws)), width, float(1 - given.mean()))


def counts_rows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The accuracy-change interval (:func:`~sst_interp.experiments.intervals.change_intervals`) of each row of
    ``values`` [draws, n] in {-1, 0, +1}."""
    return change_intervals((values > 0).sum(axis=1), (values < 0).sum(axis=1), values.shape[1])


def bca_rows(resamples: int, seed: int) -> Rows:
    """The interval these tables used before issue 44, row by row: a 95% BCa bootstrap of the mean
    (``scipy.stats.bootstrap``, ``resamples`` resamples, seeded), and the value itself when a row has no spread
    (as the old ``mean_interval`` did). The negative control: the coverage test must fail it."""

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
    return Coverage(float(p[hit].sum()), 0.0, float((p * (high - low)).sum()), 0.0)


def exact_rate(rate: float, n: int) -> Coverage:
    """Exact coverage of the flip-rate (Clopper-Pearson) interval at ``n`` questions and true ``rate``."""

    k = np.arange(n + 1)
    p = binom.pmf(k, n, rate)
    low, high = rate_intervals(k, n)
    hit = (low <= rate + 1e-12) & (rate - 1e-12 <= high)
    return Coverage(float(p[hit].sum()), 0.0, float((p * (high - low)).sum()), 0.0)


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
