"""The sequential Monte Carlo p-value of the LOOCV's permutation test (issue 58, :mod:`sst_interp.probe.sequential`):
it stops early on a clear null and on a clear effect, its p is valid (exactly, by enumerating every way the plan can
stop, and on a seeded simulation with a cheap statistic that ties as LOOCV counts do), and at 99 draws it decides
exactly as the fixed test of 99 draws at 0.05. The LOOCV counts the labellings its strata allow before training and
skips the permutations when p <= 0.05 is out of reach."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sst_interp.kernels.errors import UsageError
from sst_interp.probe import loocv as loocv_module
from sst_interp.probe.loocv import SKIPPED, LoocvResult, loocv, unreachable
from sst_interp.probe.model import ProbeConfig
from sst_interp.probe.permutation import label_arrangements
from sst_interp.probe.sequential import SequentialPlan, run_sequential, sequential_p, settled
from sst_interp.probe.train import TrainConfig
from tests.unit.probe import planted


def _stream(values):
    it = iter(values)
    return lambda: next(it)


def test_h_is_the_count_the_fixed_test_cannot_be_significant_at():
    assert SequentialPlan(99).exceedances == 5  # (g + 1) / 100 <= 0.05 iff g <= 4
    assert SequentialPlan(100).exceedances == 5
    assert SequentialPlan(20).exceedances == 1  # significant only with no exceedance: 1/21
    assert SequentialPlan(9).exceedances == 1 and not SequentialPlan(9).reaches_alpha  # the smallest p is 1/10
    assert SequentialPlan(999, alpha=0.01).exceedances == 10
    for bad in ({"max_draws": 0}, {"max_draws": 10, "alpha": 0.0}, {"max_draws": 10, "alpha": 1.5}):
        with pytest.raises(UsageError):
            SequentialPlan(**bad)


def test_a_clear_null_stops_at_h_exceedances():
    rng = np.random.default_rng(0)
    test = run_sequential(-3.0, lambda: rng.standard_normal(), SequentialPlan(99))
    # every draw of N(0, 1) reaches -3 but about 1 in 700: five draws, Besag-Clifford p = 5 / 5
    assert test.draws == 5 and test.p == 1.0
    assert "not significant at 0.05" in test.stop and "5 of 5" in test.stop


def test_a_clear_effect_stops_once_significance_is_settled():
    rng = np.random.default_rng(0)
    test = run_sequential(10.0, lambda: rng.standard_normal(), SequentialPlan(99))
    # no draw reaches 10: after 95 even four more exceedances would leave the fixed test at 5 / 100 <= 0.05
    assert test.draws == 95 and test.exceedances == 0
    assert test.p == pytest.approx(0.05) and "significant at 0.05 whatever the 4 left" in test.stop
    # a smaller alpha settles later and gives the strong effect a finer p
    fine = run_sequential(10.0, lambda: rng.standard_normal(), SequentialPlan(99, alpha=0.01))
    assert fine.draws == 99 and fine.p == pytest.approx(0.01) and "all 99 draws" in fine.stop


def test_an_effect_in_between_is_settled_late_with_the_bound_as_p():
    # 3 exceedances by draw 81: at 98 draws one more could leave the fixed test at (4 + 1) / 100 = 0.05 at most,
    # so it stops there, reporting that bound (the full 99 draws would have given 4 / 100): the same answer at 0.05
    values = [1.0 if i in (10, 50, 80) else 0.0 for i in range(99)]
    test = run_sequential(1.0, _stream(values), SequentialPlan(99))
    assert test.draws == 98 and test.p == pytest.approx(5 / 100)
    # one more exceedance early on: never settled before the end, the fixed test's p of all 99 draws
    values = [1.0 if i in (5, 10, 50, 80) else 0.0 for i in range(99)]
    test = run_sequential(1.0, _stream(values), SequentialPlan(99))
    assert test.draws == 99 and test.p == pytest.approx(5 / 100) and "all 99 draws" in test.stop


def _terminal_states(plan: SequentialPlan) -> list[tuple[int, int, int]]:
    """Every (draws, exceedances, paths) the plan can stop at: the number of exceedance sequences that reach it
    without having stopped before (a walk over draws, independent of run_sequential's loop)."""
    alive, out = {(0, 0): 1}, []
    for _ in range(plan.max_draws + 1):
        nxt: dict[tuple[int, int], int] = {}
        for (l, g), paths in alive.items():
            if settled(g, l, plan):
                out.append((l, g, paths))
                continue
            for step in (0, 1):
                nxt[(l + 1, g + step)] = nxt.get((l + 1, g + step), 0) + paths
        alive = nxt
    assert not alive
    return out


def _beta(g: int, l: int) -> float:
    """int_0^1 u^g (1 - u)^(l - g) du: the null probability of one exceedance sequence, u ~ Uniform(0, 1)."""
    return math.exp(math.lgamma(g + 1) + math.lgamma(l - g + 1) - math.lgamma(l + 2))


@pytest.mark.parametrize("plan", [SequentialPlan(99), SequentialPlan(20), SequentialPlan(9), SequentialPlan(150),
                                  SequentialPlan(99, alpha=0.01), SequentialPlan(40, alpha=0.2)],
                         ids=lambda p: f"N{p.max_draws}-a{p.alpha}")
def test_the_p_value_is_exactly_valid_at_every_level(plan):
    # Under the null the observation is one more draw of the same statistic, so each draw reaches it with
    # probability u, u uniform (a continuous statistic; ties only make u larger, and p larger). P(p <= a) is then a
    # sum over the plan's stopping points, computed exactly here.
    states = _terminal_states(plan)
    mass = [(sequential_p(g, l, plan), paths * _beta(g, l)) for l, g, paths in states]
    assert sum(m for _, m in mass) == pytest.approx(1.0)
    for level in sorted({p for p, _ in mass} | {0.01, 0.05, 0.1}):
        size = sum(m for p, m in mass if p <= level + 1e-12)
        assert size <= level + 1e-9, f"P(p <= {level:.4f}) = {size:.4f}"


def test_at_99_draws_it_decides_as_the_fixed_test_of_99():
    plan = SequentialPlan(99)
    for l, g, _ in _terminal_states(plan):
        p = sequential_p(g, l, plan)
        # the fixed test ends significant iff it has at most 4 exceedances; a stop at 5 has p = 5 / l > 0.05,
        # a stop for significance has at most 4 whatever the draws left
        assert (p <= 0.05) == (g <= 4), (l, g, p)


def test_a_seeded_simulation_holds_the_size_on_a_statistic_with_ties():
    # the null: the observation and every draw are Binomial(6, 1/2) counts (as a LOOCV of 6 folds), ties included
    rng = np.random.default_rng(58)
    plan, reps = SequentialPlan(99), 4000
    p, draws = np.empty(reps), np.empty(reps)
    for i in range(reps):
        test = run_sequential(float(rng.binomial(6, 0.5)), lambda: float(rng.binomial(6, 0.5)), plan)
        p[i], draws[i] = test.p, test.draws
    for level in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5):
        share = (p <= level).mean()
        assert share <= level + 3 * math.sqrt(level * (1 - level) / reps), (level, share)
    assert draws.mean() < 20  # the null mostly stops at 5 exceedances, a fifth of the fixed test's draws


def test_too_few_labellings_skip_the_permutations_before_any_is_trained(monkeypatch):
    # correct depth 1 holds three different rows (3! = 6 orders), depth 2 one: 6 labellings, p >= 1/6 > 0.05
    monkeypatch.setattr(planted, "PATTERNS", {k: planted.PATTERNS[k] for k in ("conv", "mh1", "alt", "mh2")})
    data = planted.planted_data(n_per_pattern=1, seed=0)
    assert label_arrangements(data) == 6

    def refuse(*_args, **_kwargs):
        raise AssertionError("a permutation was drawn")

    monkeypatch.setattr(loocv_module, "permute_labels", refuse)
    result = loocv(data, ProbeConfig(16, hidden=4), TrainConfig(epochs=2), permutations=99)
    assert result.n_permutations == 0 and result.p_permutation == 1.0 and result.label_arrangements == 6
    assert result.permutation_stop.startswith(SKIPPED) and "1/6" in result.permutation_stop
    row = result.table().iloc[0]
    assert row["permutations"] == 0 and row["permutation_stop"].startswith(SKIPPED)
    # no permutation asked for: no p, and the table says so
    assert math.isnan(loocv(data, ProbeConfig(16, hidden=4), TrainConfig(epochs=2)).p_permutation)


def test_a_count_beyond_float_range_is_reachable_and_prints():
    huge = math.factorial(400)  # 400 questions in one stratum, every row different
    assert unreachable(huge, 0.05) == "" and unreachable(19, 0.05).startswith(SKIPPED)
    assert unreachable(20, 0.05) == ""  # 1/20 = 0.05 is reachable
    folds = pd.DataFrame({"question_id": ["a", "b"], "success": [True, False]})
    assert LoocvResult(folds, 0.5, label_arrangements=huge).table()["label_arrangements"].iloc[0] == math.inf

