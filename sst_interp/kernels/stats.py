"""Statistical tests and intervals used by the analyses: thin wrappers on scipy and statsmodels.

Nothing here implements a test by hand. Each function validates its input (a bad count is a
:class:`~sst_interp.kernels.errors.UsageError`), calls the library, and returns a small frozen dataclass
so tables can print the statistic, the p-value and the method that produced them.

Conventions:

- Proportion intervals default to Clopper-Pearson (exact), which is what the paper's tables print
  (e.g. 55/475 -> [8.8%, 14.8%], 4/81 -> [1.4%, 12.2%]).
- McNemar takes the two discordant counts: ``b`` = pairs that pass under condition A and fail under
  B, ``c`` = the reverse. The concordant cells do not enter any McNemar statistic.
- Bootstrap intervals use :func:`scipy.stats.bootstrap` with a fixed seed (default 42), so a table
  is identical from run to run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.proportion import proportion_confint

from sst_interp.kernels.errors import UsageError

Alternative = Literal["two-sided", "greater", "less"]
ProportionMethod = Literal["clopper-pearson", "wilson"]

DEFAULT_SEED = 42


@dataclass(frozen=True)
class TestResult:
    """Outcome of one hypothesis test.

    Args:
        statistic: the test statistic (chi-square, U, successes, odds ratio, ...).
        pvalue: the p-value under the stated alternative.
        method: what was computed, e.g. ``"McNemar chi-square (continuity corrected)"``.
        alternative: ``"two-sided"``, ``"greater"`` or ``"less"``.
        df: degrees of freedom for chi-square tests, else None.
    """

    __test__ = False  # not a pytest test class

    statistic: float
    pvalue: float
    method: str
    alternative: str = "two-sided"
    df: int | None = None


@dataclass(frozen=True)
class Interval:
    """A confidence interval.

    Args:
        low: lower bound.
        high: upper bound.
        level: confidence level (e.g. 0.95).
        method: how it was computed.
    """

    low: float
    high: float
    level: float
    method: str


@dataclass(frozen=True)
class OddsRatio:
    """Sample odds ratio of a 2x2 table with its interval and Fisher exact p-value.

    Args:
        odds_ratio: (a*d)/(b*c) for the table [[a, b], [c, d]] (inf or 0 when a cell is 0).
        ci: confidence interval (scipy ``odds_ratio(kind="sample")``: normal approximation on log OR).
        pvalue: two-sided Fisher exact p-value.
    """

    odds_ratio: float
    ci: Interval
    pvalue: float


def _check_count(name: str, value: int) -> int:
    if isinstance(value, (bool, np.bool_)) or int(value) != value or value < 0:
        raise UsageError(f"{name} must be a non-negative integer count, got {value!r}; pass a count")
    return int(value)


def _check_k_n(k: int, n: int) -> tuple[int, int]:
    k = _check_count("k", k)
    n = _check_count("n", n)
    if n == 0 or k > n:
        raise UsageError(f"need 0 <= k <= n and n > 0, got k={k}, n={n}; pass successes and trials")
    return k, n


def _check_prob(name: str, p: float) -> float:
    if not 0.0 <= float(p) <= 1.0:
        raise UsageError(f"{name} must be a probability in [0, 1], got {p!r}")
    return float(p)


def _check_level(level: float) -> float:
    if not 0.0 < float(level) < 1.0:
        raise UsageError(f"confidence level must lie strictly between 0 and 1, got {level!r}")
    return float(level)


def _table_2x2(table: Sequence[Sequence[int]] | np.ndarray) -> np.ndarray:
    arr = np.asarray(table)
    if arr.shape != (2, 2):
        raise UsageError(f"expected a 2x2 table of counts, got shape {arr.shape}; pass [[a, b], [c, d]]")
    for value in arr.ravel():
        _check_count("table cell", value)
    return arr.astype(np.int64)


def binomial_test(k: int, n: int, p: float, alternative: Alternative = "greater") -> TestResult:
    """Exact binomial test of ``k`` successes in ``n`` trials against success probability ``p``.

    Example (paper, LOOCV): ``binomial_test(29, 48, 133/357).pvalue`` = 9.4e-4.
    """
    k, n = _check_k_n(k, n)
    p = _check_prob("p", p)
    res = sps.binomtest(k, n, p, alternative=alternative)
    return TestResult(float(k), float(res.pvalue), f"exact binomial test (p0={p:.6g})", alternative)


def binomial_ci(
    k: int, n: int, p: float = 0.5, alternative: Alternative = "greater", level: float = 0.95
) -> Interval:
    """Clopper-Pearson interval matching an exact binomial test's alternative.

    A one-sided ``"greater"`` test gives ``[low, 1.0]`` (as the paper's "[0.913, 1.0]").
    """
    k, n = _check_k_n(k, n)
    res = sps.binomtest(k, n, _check_prob("p", p), alternative=alternative)
    ci = res.proportion_ci(confidence_level=_check_level(level), method="exact")
    return Interval(float(ci.low), float(ci.high), level, f"Clopper-Pearson ({alternative})")


def proportion_interval(
    k: int, n: int, level: float = 0.95, method: ProportionMethod = "clopper-pearson"
) -> Interval:
    """Two-sided interval for a proportion ``k/n`` (statsmodels ``proportion_confint``)."""
    k, n = _check_k_n(k, n)
    level = _check_level(level)
    sm_method = {"clopper-pearson": "beta", "wilson": "wilson"}.get(method)
    if sm_method is None:
        raise UsageError(f"unknown interval method {method!r}; use 'clopper-pearson' or 'wilson'")
    low, high = proportion_confint(k, n, alpha=1.0 - level, method=sm_method)
    return Interval(float(low), float(high), level, method)


def wilson_interval(k: int, n: int, level: float = 0.95) -> Interval:
    """Wilson score interval for ``k/n``."""
    return proportion_interval(k, n, level, "wilson")


def clopper_pearson_interval(k: int, n: int, level: float = 0.95) -> Interval:
    """Clopper-Pearson (exact) interval for ``k/n``."""
    return proportion_interval(k, n, level, "clopper-pearson")


def mcnemar_chi2(b: int, c: int, correction: bool = True) -> TestResult:
    """McNemar chi-square test from the discordant counts ``b`` (A pass, B fail) and ``c`` (reverse).

    Paper: 42 vs 6 without correction gives chi2 = 27.0; 30 vs 14 with correction gives p = 0.024.
    """
    b, c = _check_count("b", b), _check_count("c", c)
    if b + c == 0:
        raise UsageError("McNemar needs at least one discordant pair (b + c > 0)")
    res = sm_mcnemar(np.array([[0, b], [c, 0]]), exact=False, correction=correction)
    label = "continuity corrected" if correction else "no continuity correction"
    return TestResult(float(res.statistic), float(res.pvalue), f"McNemar chi-square ({label})", "two-sided", 1)


def mcnemar_exact(b: int, c: int, alternative: Alternative = "two-sided") -> TestResult:
    """Exact McNemar test: binomial test of ``b`` out of ``b + c`` discordant pairs at 1/2.

    ``alternative="greater"`` tests that A-pass/B-fail pairs outnumber the reverse
    (paper: 16 vs 0 one-sided gives p = 1.5e-5).
    """
    b, c = _check_count("b", b), _check_count("c", c)
    if b + c == 0:
        raise UsageError("McNemar needs at least one discordant pair (b + c > 0)")
    res = sps.binomtest(b, b + c, 0.5, alternative=alternative)
    return TestResult(float(b), float(res.pvalue), "McNemar exact (binomial on discordant pairs)", alternative)


def mann_whitney(
    x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, alternative: Alternative = "two-sided"
) -> TestResult:
    """Mann-Whitney U test of two independent samples (``x: [n]``, ``y: [m]``)."""
    xa, ya = np.asarray(x, dtype=float).ravel(), np.asarray(y, dtype=float).ravel()
    if xa.size == 0 or ya.size == 0:
        raise UsageError("Mann-Whitney needs two non-empty samples")
    if not (np.isfinite(xa).all() and np.isfinite(ya).all()):
        raise UsageError("Mann-Whitney samples must be finite; drop NaN/inf first")
    res = sps.mannwhitneyu(xa, ya, alternative=alternative)
    return TestResult(float(res.statistic), float(res.pvalue), "Mann-Whitney U", alternative)


def fisher_exact(table: Sequence[Sequence[int]] | np.ndarray, alternative: Alternative = "two-sided") -> TestResult:
    """Fisher's exact test on a 2x2 table; the statistic is the sample odds ratio."""
    arr = _table_2x2(table)
    res = sps.fisher_exact(arr, alternative=alternative)
    return TestResult(float(res.statistic), float(res.pvalue), "Fisher exact", alternative)


def odds_ratio(table: Sequence[Sequence[int]] | np.ndarray, level: float = 0.95) -> OddsRatio:
    """Sample odds ratio of ``[[a, b], [c, d]]`` with a confidence interval and Fisher p-value.

    Example (paper, argmax concentration): [[251, 1839], [224, 6265]] -> OR = 3.82.
    """
    arr = _table_2x2(table)
    level = _check_level(level)
    res = sps.contingency.odds_ratio(arr, kind="sample")
    ci = res.confidence_interval(confidence_level=level)
    fisher = sps.fisher_exact(arr)
    return OddsRatio(
        float(res.statistic), Interval(float(ci.low), float(ci.high), level, "log-OR normal"), float(fisher.pvalue)
    )


def chi2_independence(table: Sequence[Sequence[int]] | np.ndarray, correction: bool = True) -> TestResult:
    """Pearson chi-square test of independence on an r x c contingency table of counts.

    ``correction`` applies Yates' continuity correction (only ever used by scipy for 1 degree of freedom).
    """
    arr = np.asarray(table)
    if arr.ndim != 2 or min(arr.shape) < 2:
        raise UsageError(f"expected an r x c table with r, c >= 2, got shape {arr.shape}")
    for value in arr.ravel():
        _check_count("table cell", value)
    if (arr.sum(axis=0) == 0).any() or (arr.sum(axis=1) == 0).any():
        raise UsageError("chi-square independence needs every row and column total > 0")
    res = sps.chi2_contingency(arr, correction=correction)
    return TestResult(float(res.statistic), float(res.pvalue), "chi-square independence", "two-sided", int(res.dof))


def chi2_goodness_of_fit(
    observed: Sequence[float] | np.ndarray, expected: Sequence[float] | np.ndarray
) -> TestResult:
    """Pearson chi-square goodness of fit (``observed: [k]`` counts vs ``expected: [k]`` counts, same total)."""
    obs, exp = np.asarray(observed, dtype=float).ravel(), np.asarray(expected, dtype=float).ravel()
    if obs.shape != exp.shape or obs.size < 2:
        raise UsageError("observed and expected must be equal-length count vectors with at least 2 cells")
    if (exp <= 0).any():
        raise UsageError("every expected count must be > 0 for a chi-square goodness-of-fit test")
    if not np.isclose(obs.sum(), exp.sum()):
        raise UsageError(f"observed total {obs.sum()} differs from expected total {exp.sum()}")
    res = sps.chisquare(obs, exp)
    return TestResult(float(res.statistic), float(res.pvalue), "chi-square goodness of fit", "two-sided", obs.size - 1)


def bootstrap_ci(
    data: Sequence[float] | np.ndarray,
    statistic: Callable[..., float] = np.mean,
    n_resamples: int = 10_000,
    level: float = 0.95,
    seed: int = DEFAULT_SEED,
    method: Literal["percentile", "basic", "BCa"] = "percentile",
) -> Interval:
    """Bootstrap interval of ``statistic`` over ``data: [n]`` (scipy ``bootstrap``, fixed seed).

    ``statistic`` must accept an ``axis`` keyword (numpy reductions do). A sample whose values are
    all equal returns the degenerate interval [value, value] instead of scipy's NaN.
    """
    arr = np.asarray(data, dtype=float).ravel()
    if arr.size == 0:
        raise UsageError("bootstrap needs a non-empty sample")
    if not np.isfinite(arr).all():
        raise UsageError("bootstrap sample must be finite; drop NaN/inf first")
    level = _check_level(level)
    if int(n_resamples) < 1:
        raise UsageError(f"n_resamples must be >= 1, got {n_resamples}")
    if np.all(arr == arr[0]):
        value = float(statistic(arr))
        return Interval(value, value, level, f"bootstrap {method} (degenerate sample)")
    res = sps.bootstrap(
        (arr,),
        statistic,
        n_resamples=int(n_resamples),
        confidence_level=level,
        method=method,
        vectorized=True,
        batch=max(1, min(int(n_resamples), 4_000_000 // arr.size)),  # bound memory to ~32 MB per batch
        rng=np.random.default_rng(seed),
    )
    ci = res.confidence_interval
    return Interval(float(ci.low), float(ci.high), level, f"bootstrap {method} ({n_resamples} resamples, seed {seed})")
