"""How many questions an experiment would need: the exact power of the two-sided sign test the tables use.

The window and steer tables test each condition's log-prob change with the exact two-sided sign test
(:func:`sst_interp.experiments.intervals.sign_test`) and adjust a sweep's p-values by Holm's method. When a cell is
not significant, the question a researcher asks next is how many questions would show an effect of the size seen.
For a cell whose counted questions went up with frequency ``p_up`` (the questions whose bounds settle a sign; the
rest are ties), the test on ``n`` counted questions rejects at level ``alpha`` when the count of ups ``k`` has
``2 * P(Binomial(n, 1/2) <= min(k, n - k)) <= alpha``, so its power is the Binomial(n, p_up) probability of that
region, computed exactly here (``scipy.stats.binom``).

Planning level: Holm's method rejects nothing unless the smallest p clears ``alpha / cells``, so a sweep of
``cells`` conditions plans each cell at ``alpha / cells`` (Bonferroni, the bound Holm's first step applies; the
figure is therefore conservative for every cell but the strongest).

The power of an exact test is not monotone in ``n`` (it saw-tooths as the discrete rejection region grows by one
count at a time); the figure reported is the smallest ``n`` from which the power stays at or above the target
through the searched range, which runs to four times the normal approximation's estimate (at least 200, at most
:data:`MAX_QUESTIONS`), so adding questions beyond it does not lose the power.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import binom, norm

#: The largest question count searched; beyond it the effect is reported as out of reach (NaN).
MAX_QUESTIONS = 100_000
TARGET_POWER = 0.8
ALPHA = 0.05


def sign_test_power(p_up: float, n: np.ndarray | int, alpha: float = ALPHA) -> np.ndarray:
    """Exact power [len(n)] of the two-sided exact sign test at level ``alpha`` on ``n`` counted questions, each up
    with probability ``p_up`` (independently)."""
    n = np.atleast_1d(np.asarray(n, dtype=np.int64))
    # c: the largest count k with P(Binomial(n, 1/2) <= k) <= alpha / 2 (-1: the region is empty)
    c = binom.ppf(alpha / 2, n, 0.5).astype(np.int64)
    c = np.where(binom.cdf(c, n, 0.5) > alpha / 2, c - 1, c)
    lower = np.where(c >= 0, binom.cdf(c, n, p_up), 0.0)
    upper = np.where(c >= 0, binom.sf(n - c - 1, n, p_up), 0.0)
    return lower + upper


def counted_questions_needed(p_up: float, alpha: float = ALPHA, power: float = TARGET_POWER) -> float:
    """The smallest number of counted (sign-settling) questions from which the sign test's power stays
    >= ``power`` (NaN when ``p_up`` is 1/2, or when even :data:`MAX_QUESTIONS` do not reach it)."""
    if not 0.0 <= p_up <= 1.0 or not 0.0 < alpha < 1.0:
        raise ValueError(f"need 0 <= p_up <= 1 and 0 < alpha < 1, got p_up={p_up}, alpha={alpha}")
    if p_up == 0.5:
        return float("nan")
    n = np.arange(1, _search_limit(p_up, alpha, power) + 1)
    short = np.flatnonzero(sign_test_power(p_up, n, alpha) < power)
    if len(short) == 0:
        return 1.0
    if short[-1] == len(n) - 1:
        return float("nan")
    return float(n[short[-1] + 1])


def _search_limit(p_up: float, alpha: float, power: float) -> int:
    """Four times the normal approximation's counted-question estimate, within [200, :data:`MAX_QUESTIONS`]."""
    z_alpha, z_power = norm.isf(alpha / 2), norm.ppf(power)
    estimate = ((z_alpha * 0.5 + z_power * math.sqrt(p_up * (1 - p_up))) / abs(p_up - 0.5)) ** 2
    return int(min(MAX_QUESTIONS, max(200, 4 * math.ceil(estimate))))


def questions_needed(up: int, down: int, questions: int, cells: int = 1, alpha: float = ALPHA,
                     power: float = TARGET_POWER) -> float:
    """Questions (counted and tied alike) an experiment needs for the sign test to find the effect seen with
    power ``power``, planned at ``alpha / cells``: the counted questions :func:`counted_questions_needed` gives at
    the observed ``p_up = up / (up + down)``, scaled by the observed share of counted questions
    ``(up + down) / questions``. NaN when nothing was counted or up equals down."""
    if up < 0 or down < 0 or questions < up + down or cells < 1:
        raise ValueError(f"need 0 <= up + down <= questions and cells >= 1, got up={up}, down={down}, "
                         f"questions={questions}, cells={cells}")
    counted = up + down
    if counted == 0:
        return float("nan")
    needed = counted_questions_needed(up / counted, alpha / cells, power)
    return float("nan") if math.isnan(needed) else float(math.ceil(needed * questions / counted))
