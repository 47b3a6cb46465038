"""The experiments' statistics hold their size (issue 30, defect 5 and item 3): no interval from one question (it
used to print a zero-width interval) and no sign test or median interval below 6 (issues 44 and 58 measured the
intervals' coverage: test_interval_coverage.py), censored questions bound the mean and the median's interval from
both sides instead of being dropped, the sign test is exact, and a sweep's p-values are Holm-adjusted with the
correction named."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest

from sst_interp.experiments.effects import flip_and_logprob_columns, holm
from sst_interp.experiments.intervals import MIN_SIGN_N, adjusted, median_interval, sign_test


def bounds(low, high=None) -> pd.DataFrame:
    high = low if high is None else high
    return pd.DataFrame({"low": low, "high": high, "censored": np.asarray(low) != np.asarray(high)},
                        index=[f"q{i}" for i in range(len(low))])


def test_one_observation_gives_no_interval():
    # issue 30: "Steer +1: -7.78 [-7.78, -7.78] from 1 of 8 questions"
    row = flip_and_logprob_columns(0, 0, 1, bounds([-7.78]))
    assert row["logprob_change_mean"] == -7.78 and row["logprob_change_median"] == -7.78
    assert np.isnan(row["logprob_change_median_ci_low"]) and np.isnan(row["logprob_change_median_ci_high"])
    assert np.isnan(row["flip_rate_ci_low"]) and np.isnan(row["flip_rate_ci_high"])
    assert np.isnan(row["logprob_sign_p"])
    for n in range(0, MIN_SIGN_N):
        assert np.isnan(tuple(median_interval(np.arange(n, dtype=float)))).all()
    assert not np.isnan(tuple(median_interval(np.arange(MIN_SIGN_N, dtype=float)))).any()
    for n in range(0, MIN_SIGN_N):
        assert np.isnan(sign_test(np.arange(1, n + 1.0), np.arange(1, n + 1.0))[0])


def test_censored_questions_bound_the_mean_and_the_median_from_both_sides_instead_of_being_dropped():
    observed = [-0.1, 0.2, -0.3, 0.1, 0.0, -0.2]
    # two more questions fell out of the top-K: each at most -5 (the K-th log-prob minus the clean one), at least -80
    row = flip_and_logprob_columns(0, 0, 8, bounds(observed + [-80.0, -80.0], observed + [-5.0, -5.0]))
    assert np.isnan(row["logprob_change_mean"])  # not the mean of the six left (-0.05, biased towards 0)
    assert row["logprob_change_bound_high"] == pytest.approx((sum(observed) - 10.0) / 8)
    assert row["logprob_change_bound_low"] == pytest.approx((sum(observed) - 160.0) / 8)
    # the censored two are below every observed change at either bound, so the median is settled: -0.2 and -0.1
    # are the middle two of eight, whatever the censored questions' true values
    assert row["logprob_change_median"] == pytest.approx(-0.15)
    # n = 8: k = 1, [min of the low bounds, max of the high bounds]
    assert (row["logprob_change_median_ci_low"], row["logprob_change_median_ci_high"]) == (-80.0, 0.2)
    assert (row["logprob_compared"], row["logprob_censored"]) == (6, 2)
    # the sign test counts the censored ones as falls (their bound is below 0) and leaves out the zero
    assert row["logprob_sign_n"] == 7
    assert row["logprob_sign_p"] == pytest.approx(binomtest(2, 7, 0.5).pvalue)


def test_the_sign_test_is_exact_and_leaves_out_unsettled_signs():
    p, n = sign_test(np.array([1, 1, 1, 1, 1, 1, 1, -1.0, -3.0]), np.array([1, 1, 1, 1, 1, 1, 1, -1.0, 2.0]))
    assert n == 8 and p == pytest.approx(2 * 9 / 256)  # 7 up of 8: P(X >= 7) + P(X <= 1) = 2 * 9 / 256


def test_censoring_that_straddles_the_middle_leaves_the_median_unsettled_but_bounded():
    observed = [0.4, 0.3, 0.2, -0.2, -0.3, -0.4]
    # two censored questions whose bounds reach either side of the middle: the median could be anything between
    row = flip_and_logprob_columns(0, 0, 8, bounds(observed + [-50.0, -50.0], observed + [0.5, 0.5]))
    assert np.isnan(row["logprob_change_median"])
    low, high = median_interval(np.array(observed + [-50.0, -50.0])), median_interval(np.array(observed + [0.5, 0.5]))
    assert (row["logprob_change_median_ci_low"], row["logprob_change_median_ci_high"]) == (low.low, high.high)


def test_the_median_interval_holds_the_interval_of_every_value_inside_the_bounds():
    # order statistics are monotone in every value: any true changes within [low, high] give an interval inside
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(6, 30))
        true = rng.normal(size=n)
        low, high = true - rng.exponential(size=n) * (rng.random(n) < 0.3), true + rng.exponential(size=n) * 0.1
        row = flip_and_logprob_columns(0, 0, n, bounds(low, high))
        inner = median_interval(true)
        assert row["logprob_change_median_ci_low"] <= inner.low and inner.high <= row["logprob_change_median_ci_high"]


def test_flip_rate_columns_use_the_exact_interval():
    from scipy.stats import binomtest

    row = flip_and_logprob_columns(2, 1, 8, bounds([0.1, -0.2, 0.3, 0.0, 0.1, -0.1, 0.2, 0.05]))
    ci = binomtest(3, 8).proportion_ci(0.95, "exact")
    assert row["flip_rate_pct"] == pytest.approx(37.5)
    assert (row["flip_rate_ci_low"], row["flip_rate_ci_high"]) == pytest.approx((100 * ci.low, 100 * ci.high))


def test_holm_adjusts_a_sweeps_cells_and_names_the_correction():
    p = [0.01, 0.02, 0.04, np.nan]
    np.testing.assert_allclose(adjusted(p)[:3], [0.03, 0.04, 0.04])
    assert np.isnan(adjusted(p)[3])
    table = pd.DataFrame({"condition": ["clean", "a", "b", "c"], "logprob_sign_p": [np.nan, 0.01, 0.02, 0.04],
                          "logprob_sign_p_holm": np.nan, "correction": "none (reference row)"})
    out = holm(table, table["condition"] != "clean")
    np.testing.assert_allclose(out["logprob_sign_p_holm"].to_numpy()[1:], [0.03, 0.04, 0.04])
    assert list(out["correction"]) == ["none (reference row)"] + ["holm over 3 cells"] * 3
