"""The experiments' statistics hold their size (issue 30, defect 5 and item 3): no interval from one question (it
used to print a zero-width interval) and no sign test below 6 (issue 44 measured the intervals' coverage:
test_interval_coverage.py), censored questions bound the mean from both sides
instead of being dropped, the sign test is exact, and a sweep's p-values are Holm-adjusted with the correction
named."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest

from sst_interp.experiments.effects import flip_and_logprob_columns, holm
from sst_interp.experiments.intervals import MIN_INTERVAL_N, MIN_SIGN_N, adjusted, mean_interval, sign_test


def bounds(low, high=None) -> pd.DataFrame:
    high = low if high is None else high
    return pd.DataFrame({"low": low, "high": high, "censored": np.asarray(low) != np.asarray(high)},
                        index=[f"q{i}" for i in range(len(low))])


def test_one_observation_gives_no_interval():
    # issue 30: "Steer +1: -7.78 [-7.78, -7.78] from 1 of 8 questions"
    row = flip_and_logprob_columns(0, 0, 1, bounds([-7.78]))
    assert row["logprob_change_mean"] == -7.78
    assert np.isnan(row["logprob_change_ci_low"]) and np.isnan(row["logprob_change_ci_high"])
    assert np.isnan(row["flip_rate_ci_low"]) and np.isnan(row["flip_rate_ci_high"])
    assert np.isnan(row["logprob_sign_p"])
    for n in range(0, MIN_INTERVAL_N):
        assert np.isnan(tuple(mean_interval(np.arange(n, dtype=float)))).all()
    assert not np.isnan(tuple(mean_interval(np.arange(MIN_INTERVAL_N, dtype=float)))).any()
    for n in range(0, MIN_SIGN_N):
        assert np.isnan(sign_test(np.arange(1, n + 1.0), np.arange(1, n + 1.0))[0])


def test_censored_questions_bound_the_mean_from_both_sides_instead_of_being_dropped():
    observed = [-0.1, 0.2, -0.3, 0.1, 0.0, -0.2]
    # two more questions fell out of the top-K: each at most -5 (the K-th log-prob minus the clean one), at least -80
    row = flip_and_logprob_columns(0, 0, 8, bounds(observed + [-80.0, -80.0], observed + [-5.0, -5.0]))
    assert np.isnan(row["logprob_change_mean"])  # not the mean of the six left (-0.05, biased towards 0)
    assert row["logprob_change_bound_high"] == pytest.approx((sum(observed) - 10.0) / 8)
    assert row["logprob_change_bound_low"] == pytest.approx((sum(observed) - 160.0) / 8)
    assert row["logprob_change_ci_low"] < row["logprob_change_bound_low"] < row["logprob_change_bound_high"]
    assert row["logprob_change_bound_high"] < row["logprob_change_ci_high"]
    assert (row["logprob_compared"], row["logprob_censored"]) == (6, 2)
    # the sign test counts the censored ones as falls (their bound is below 0) and leaves out the zero
    assert row["logprob_sign_n"] == 7
    assert row["logprob_sign_p"] == pytest.approx(binomtest(2, 7, 0.5).pvalue)


def test_the_sign_test_is_exact_and_leaves_out_unsettled_signs():
    p, n = sign_test(np.array([1, 1, 1, 1, 1, 1, 1, -1.0, -3.0]), np.array([1, 1, 1, 1, 1, 1, 1, -1.0, 2.0]))
    assert n == 8 and p == pytest.approx(2 * 9 / 256)  # 7 up of 8: P(X >= 7) + P(X <= 1) = 2 * 9 / 256


def test_t_interval_equals_the_textbook_formula():
    from scipy.stats import t

    values = np.random.default_rng(0).normal(1.0, 0.5, 40)
    low, high = mean_interval(values)
    half = t.ppf(0.975, 39) * values.std(ddof=1) / np.sqrt(40)
    assert (low, high) == pytest.approx((values.mean() - half, values.mean() + half))


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
