"""Sequential Monte Carlo p-values (Besag and Clifford 1991): draw null statistics one at a time and stop as soon as
the answer at ``alpha`` is settled, so that a permutation test spends its draws only where they can change it
(issue 58; the LOOCV's label permutations, :mod:`sst_interp.probe.loocv`, each retrain every fold).

A fixed Monte Carlo test draws N null statistics and reports ``p = (1 + g) / (1 + N)``, g the draws that reach the
observed statistic (``>=``: ties count against the observation). At level ``alpha`` it is significant iff
``g <= h - 1``, with ``h = floor(alpha (N + 1))``. The sequential plan (:class:`SequentialPlan`) draws until one of:

- **h exceedances** (after l draws): the fixed test could no longer be significant. Besag and Clifford's p is
  ``p = h / l``, valid on its own (under the null ``P(p <= a) <= a`` at every ``a``); when ``alpha (N + 1)`` is a
  whole number (N = 99 at 0.05) it is always above ``alpha``, so no decision at ``alpha`` differs from the fixed
  test's. A clear null stops after about ``h / p`` draws.
- **significance settled** (l draws, g exceedances, ``g + (N - l) <= h - 1``): even if every draw left reached the
  observation the fixed test would be significant. The p reported is the most the fixed test's could still be,
  ``(g + N - l + 1) / (N + 1)``: never below the p of the full plan on the same draws, so it is valid too. A clear
  effect stops ``h - 1`` draws early, and its p is the bound (h / (N + 1), 0.05 at N = 99), not the
  ``1 / (N + 1)`` the full N would show: pass a smaller ``alpha`` for a finer p on a strong effect.
- **N draws**: the fixed test's ``(g + 1) / (N + 1)`` (the same formula with none left).

A p-value needs at least ``1 / alpha - 1`` draws to reach ``alpha`` (``1 / (N + 1) <= alpha``); below that the plan
still runs (``h`` is then 1: it stops at the first exceedance) and its reason says ``alpha`` is out of reach.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from sst_interp.kernels.errors import UsageError
from sst_interp.probe.defaults import DEFAULT_ALPHA


@dataclass(frozen=True)
class SequentialPlan:
    """How many null draws at most, and the level whose answer stops the drawing.

    Args:
        max_draws: N, the draws of the fixed test this plan shortens (its p-value's resolution is ``1 / (N + 1)``).
        alpha: the level at which the answer is settled (module docstring).
    """

    max_draws: int
    alpha: float = DEFAULT_ALPHA

    def __post_init__(self) -> None:
        if self.max_draws < 1:
            raise UsageError(f"a sequential test needs at least 1 draw, got {self.max_draws}")
        if not 0 < self.alpha < 1:
            raise UsageError(f"alpha must be in (0, 1), got {self.alpha}")

    @property
    def exceedances(self) -> int:
        """h: the exceedances after which the fixed test cannot be significant at ``alpha``, at least 1."""
        # round first: 0.05 * 100 is 5.000000000000001 in floating point, and floor must see 5
        return max(1, math.floor(round(self.alpha * (self.max_draws + 1), 9)))

    @property
    def reaches_alpha(self) -> bool:
        """Whether ``max_draws`` can give a p-value at or below ``alpha`` at all (``1 / (N + 1) <= alpha``)."""
        return 1 / (self.max_draws + 1) <= self.alpha


def sequential_p(exceedances: int, draws: int, plan: SequentialPlan) -> float:
    """The p-value of stopping after ``draws`` null draws of which ``exceedances`` reached the observation: ``h / l``
    at h exceedances, else ``(g + N - l + 1) / (N + 1)`` (the module docstring says why both are valid)."""
    if not 0 <= exceedances <= min(draws, plan.exceedances) or draws > plan.max_draws:
        raise UsageError(f"the plan stops at {plan.exceedances} exceedances or {plan.max_draws} draws; "
                         f"{exceedances} of {draws} is past it")
    if exceedances >= plan.exceedances:
        return plan.exceedances / draws
    return (exceedances + plan.max_draws - draws + 1) / (plan.max_draws + 1)


def settled(exceedances: int, draws: int, plan: SequentialPlan) -> bool:
    """Whether the plan stops here: h exceedances, or too few draws left for the answer at ``alpha`` to change."""
    h = plan.exceedances
    return exceedances >= h or exceedances + plan.max_draws - draws <= h - 1


@dataclass(frozen=True)
class SequentialTest:
    """A sequential Monte Carlo test as run: the observation, the null draws in order, the p-value and why it stopped.

    Args:
        observed: the observed statistic.
        null: the null statistics drawn, in order (``len(null)`` draws used).
        plan: the plan it ran under.
    """

    observed: float
    null: tuple[float, ...]
    plan: SequentialPlan

    @property
    def draws(self) -> int:
        """Null draws used."""
        return len(self.null)

    @property
    def exceedances(self) -> int:
        """Draws whose statistic reached the observation (``>=``)."""
        return sum(value >= self.observed for value in self.null)

    @property
    def p(self) -> float:
        """:func:`sequential_p` of the draws."""
        return sequential_p(self.exceedances, self.draws, self.plan)

    @property
    def stop(self) -> str:
        """Why it stopped, in words (the tables print it beside the p-value)."""
        plan, g, n = self.plan, self.exceedances, self.draws
        out_of_reach = "" if plan.reaches_alpha else (f"; {plan.max_draws} draws cannot reach p <= {plan.alpha:g} "
                                                      f"(the smallest p is 1/{plan.max_draws + 1})")
        if g >= plan.exceedances:
            return (f"stopped at {g} of {n} draws reaching the observation (Besag-Clifford p = {g}/{n}): not "
                    f"significant at {plan.alpha:g} whatever the {plan.max_draws - n} draws left{out_of_reach}")
        if n < plan.max_draws:
            return (f"stopped after {n} of {plan.max_draws} draws ({g} reaching the observation): significant at "
                    f"{plan.alpha:g} whatever the {plan.max_draws - n} left; p is the most they could make it")
        return f"all {n} draws ({g} reaching the observation){out_of_reach}"


def run_sequential(observed: float, draw: Callable[[], float], plan: SequentialPlan) -> SequentialTest:
    """Draw null statistics with ``draw()`` until :func:`settled` and return the test.

    Args:
        observed: the observed statistic (larger: more evidence against the null).
        draw: one null statistic per call (for the LOOCV: the successes of one label permutation).
        plan: the most draws and the level.
    """
    null: list[float] = []
    exceedances = 0
    while not settled(exceedances, len(null), plan):
        value = float(draw())
        null.append(value)
        exceedances += value >= observed
    return SequentialTest(float(observed), tuple(null), plan)
