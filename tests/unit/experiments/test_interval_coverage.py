"""The experiments' 95% intervals keep their coverage at the sizes they run at (issues 44 and 58): at least 0.94 at
n = 6, 8, 12 and 24 for the statistic each one serves. The median log-prob change's sign-test interval holds on
normal, heavy-tailed (t3), skewed (exponential, lognormal(0, 1)), zero-inflated (80% zero + 20% exponential) and
discrete zero-inflated data; the count intervals on flip-like (three-point) data. The same check fails the BCa
bootstrap the tables printed before issue 44 and the Student t interval of the mean they printed before issue 58.
The full table is ``bench/bench_interval_coverage.py`` and its log.

Monte Carlo cells use a fixed seed and 4,000 draws: the standard error of a coverage near 0.95 is
sqrt(0.95 * 0.05 / 4000) = 0.0034, so an interval that truly covers 95% passes 0.94 with 2.9 SE to spare, and one
that covers 0.92 fails it by 6 SE. The count intervals' and the median interval's coverage is also exact (every
outcome enumerated, or two binomial tails): no Monte Carlo error at all."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest

from sst_interp.experiments import coverage as cv
from sst_interp.experiments.intervals import (MIN_INTERVAL_N, MIN_SIGN_N, change_interval, median_interval,
                                              median_intervals, median_rank, rate_interval)

SIZES = (6, 8, 12, 24)
FLOOR = 0.94
DRAWS = 4000
#: what the issue-58 effects must cover on: the symmetric ones, the skewed, and the two zero-inflated
EFFECTS = ("normal", "t3", "exp", "lognorm", "zi-exp", "zi-count")


def test_the_study_draws_every_effect_the_issue_names():
    # issue 58: exponential, lognormal(0, 1), 80% zero + 20% exponential, and a discrete zero-inflated one
    assert set(EFFECTS) == set(cv.EFFECTS)
    rng = np.random.default_rng(0)
    for name in EFFECTS:  # the declared mean and median are the drawn data's
        data = cv.DATA[name]
        values = data.draw(rng, (200_000,))
        assert values.mean() == pytest.approx(data.mean, abs=0.02), name
        assert (values < data.median).mean() == pytest.approx(data.below, abs=0.005), name
        assert (values <= data.median).mean() == pytest.approx(data.at_most, abs=0.005), name
    zeros = (cv.DATA["zi-count"].draw(rng, (10_000,)) == 0).mean()
    assert 0.45 < zeros < 0.55 and (cv.DATA["zi-exp"].draw(rng, (10_000,)) == 0).mean() > 0.75


@pytest.mark.parametrize("data", EFFECTS)
@pytest.mark.parametrize("n", SIZES)
def test_the_median_sign_interval_covers_every_effect(data, n):
    c = cv.monte_carlo(median_intervals, cv.DATA[data], n, DRAWS, seed=58 + n, statistic="median")
    assert c.coverage >= FLOOR, f"sign interval covers {c.coverage:.3f} +- {c.se:.3f} on {data} at n = {n}"
    assert c.nan_share == 0.0
    # the exact coverage (two binomial tails) holds, and the draws agree with it within 4 SE
    exact = cv.exact_median(cv.DATA[data], n)
    assert exact.coverage >= 0.95
    assert abs(c.coverage - exact.coverage) <= 4 * max(c.se, 1e-3)


@pytest.mark.parametrize("data", ["normal", "exp", "zi-count"])
def test_the_median_interval_holds_at_every_n_from_6(data):
    # exact, so every n can be checked: the floor is 1 - 2 P(Bin(n, 1/2) <= k - 1), reached on continuous data and
    # where the median sits on a tie's edge (zi-count); n = 6 is [min, max] with 1 - 2/64
    values = [cv.exact_median(cv.DATA[data], n).coverage for n in range(MIN_SIGN_N, 101)]
    assert min(values) >= 0.95
    assert values[0] == pytest.approx(1 - 2 / 64)


def test_median_rank_is_the_exact_binomial_rank():
    # the largest k with 2 P(Bin(n, 1/2) <= k - 1) <= 0.05, in exact integers, against scipy's quantile
    for n in range(1, 121):
        k = 0
        while 40 * sum(comb(n, i) for i in range(k + 1)) <= 2 ** n:  # 2 * P(B <= k) <= 0.05
            k += 1
        assert median_rank(n) == k, n
    # the median interval starts where the sign test can first reject (n = 6): one fact, two names
    assert median_rank(MIN_SIGN_N - 1) == 0 and median_rank(MIN_SIGN_N) == 1


def test_the_median_interval_is_the_order_statistics():
    values = np.array([3.0, -1.0, 0.0, 0.0, 7.0, 2.0, 0.0, 5.0, -4.0, 1.0, 0.5, 6.0])  # n = 12: k = 3
    interval = median_interval(values)
    assert (interval.low, interval.high) == (0.0, 5.0)  # 3rd smallest (-4, -1, 0) and 3rd largest (7, 6, 5)
    assert "sign-test" in interval.method and interval.reason == ""
    # zero-inflated: the middle values all 0, the interval is [0, 0], and the median is 0
    assert tuple(median_interval(np.array([0.0] * 10 + [4.0, 9.0]))) == (0.0, 0.0)
    assert tuple(median_interval(np.array([0.0] * 9 + [4.0, 2.0, 9.0]))) == (0.0, 2.0)  # 3rd largest: 2
    # n = 6: [min, max]
    assert tuple(median_interval(np.array([4.0, -2.0, 1.0, 0.0, 3.0, 8.0]))) == (-2.0, 8.0)


def test_below_six_values_the_median_interval_is_nan_with_the_reason():
    for n in range(0, MIN_SIGN_N):
        interval = median_interval(np.arange(n, dtype=float))
        assert np.isnan(interval.low) and np.isnan(interval.high)
        assert f"below n = {MIN_SIGN_N}" in interval.reason and "[min, max]" in interval.reason
    low, high = median_intervals(np.zeros((3, 5)))
    assert np.isnan(low).all() and np.isnan(high).all() and low.shape == (3,)


@pytest.mark.parametrize(("data", "n"), [("exp", 6), ("lognorm", 12), ("zi-exp", 8), ("zi-count", 8)])
def test_the_same_check_fails_the_t_interval_of_the_mean_it_replaced(data, n):
    # issue 58 measured 0.895 (exponential, n = 6), 0.853 (lognormal, n = 12), 0.794 (zero-inflated, n = 8)
    c = cv.monte_carlo(cv.t_rows, cv.DATA[data], n, DRAWS, seed=58)
    assert c.coverage < FLOOR, f"t covers {c.coverage:.3f} on {data} at n = {n}"


@pytest.mark.parametrize("data", ["normal", "t3"])
def test_the_t_interval_held_on_the_symmetric_data_it_was_chosen_on(data):
    # why issue 44 chose it: its coverage study drew only symmetric effects
    c = cv.monte_carlo(cv.t_rows, cv.DATA[data], 8, DRAWS, seed=44)
    assert c.coverage >= FLOOR


@pytest.mark.parametrize("n", SIZES)
def test_the_accuracy_change_interval_covers_flip_like_data_exactly(n):
    c = cv.exact_change(cv.FLIP_PROBS, n)
    assert c.coverage >= FLOOR
    # the same interval on drawn samples agrees (the enumeration is of the function the tables call)
    drawn = cv.monte_carlo(cv.counts_rows, cv.DATA["flip"], n, DRAWS, seed=44 + n)
    assert drawn.coverage >= FLOOR


@pytest.mark.parametrize("n", SIZES)
def test_the_accuracy_change_interval_holds_at_its_worst_truth(n):
    worst, where = cv.worst_change(n, grid=11)
    assert worst >= FLOOR, f"covers {worst:.3f} at P(-1, 0, +1) = {where}"


@pytest.mark.parametrize("n", SIZES)
def test_the_flip_rate_interval_holds_at_every_rate(n):
    assert cv.exact_rate(cv.FLIP_PROBS[0] + cv.FLIP_PROBS[2], n).coverage >= FLOOR
    worst, where = cv.worst_rate(n, grid=101)
    assert worst >= FLOOR, f"covers {worst:.3f} at rate {where}"


@pytest.mark.parametrize(("data", "n"), [("normal", 6), ("flip", 8)])
def test_the_same_check_fails_the_bca_bootstrap_it_replaced(data, n):
    # issue 44 measured 0.854 (normal, n = 6) and 0.62 (flip-like, n = 8); 400 draws put those >= 4 SE below 0.94
    c = cv.monte_carlo(cv.bca_rows(999, 0), cv.DATA[data], n, 400, seed=7)
    assert c.coverage < FLOOR


def test_the_t_interval_is_not_used_for_flips_because_it_fails_there():
    # the reason the accuracy change has an interval of its own: t on flip-like data is zero-width (then NaN) or short
    c = cv.monte_carlo(cv.t_rows, cv.DATA["flip"], 8, DRAWS, seed=1)
    assert c.coverage < FLOOR


def test_no_flip_gives_the_exact_interval_not_a_point():
    # issue 44: "window-0-8-mean at n=8" printed 0.0 [0.0, 0.0]
    change = change_interval(np.zeros(8))
    rate = rate_interval(0, 8)
    assert rate.low == 0.0 and rate.high == pytest.approx(1 - 0.025 ** (1 / 8))
    assert change.low < 0 < change.high
    # [-q, q] with q the 97.5% Clopper-Pearson upper limit of no flip in 8: 1 - 0.0125^(1/8)
    assert change.high == pytest.approx(1 - 0.0125 ** (1 / 8)) and change.low == pytest.approx(-change.high)
    assert "Clopper-Pearson" in change.method and "Clopper-Pearson" in rate.method


@pytest.mark.parametrize("n", [0, 1])
def test_too_few_observations_give_nan_with_the_reason(n):
    for interval in (change_interval(np.zeros(n)), rate_interval(0, n)):
        assert np.isnan(interval.low) and np.isnan(interval.high)
        assert f"no interval below n = {MIN_INTERVAL_N}" in interval.reason


def test_change_interval_refuses_values_that_are_not_flips():
    with pytest.raises(ValueError, match="-1, 0 or \\+1"):
        change_interval(np.array([0.5, 0.0]))
