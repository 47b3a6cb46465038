"""Statistics wrappers reproduce the paper's reported numbers from its reported counts."""

from __future__ import annotations

import numpy as np
import pytest

from sst_interp.kernels import stats
from sst_interp.kernels.errors import UsageError


def test_binomial_loocv_matches_paper():
    # sec:halting_probe_generalisation: 29/48 at null 133/357 -> p = 9.4e-4
    res = stats.binomial_test(29, 48, 133 / 357, alternative="greater")
    assert f"{res.pvalue:.1e}" == "9.4e-04"


def test_binomial_convergent_matches_paper():
    # tab:convergent_reasoning: 54/198 at 1/256 -> p = 8.02e-82
    res = stats.binomial_test(54, 198, 1 / 256, alternative="greater")
    assert f"{res.pvalue:.2e}" == "8.02e-82"


def test_mcnemar_staged_vs_flat4_uncorrected_chi2_is_27():
    # sec:overthinking: 42 vs 6 discordant pairs -> chi2 = 27.0, p < 0.001
    res = stats.mcnemar_chi2(42, 6, correction=False)
    assert res.statistic == pytest.approx(27.0, abs=1e-12)
    assert res.pvalue < 1e-3
    assert res.df == 1


def test_mcnemar_regression_corrected_p_is_0024():
    # sec:overthinking: 30 regressions vs 14 recoveries -> p = 0.024 (continuity corrected)
    res = stats.mcnemar_chi2(30, 14, correction=True)
    assert round(res.pvalue, 3) == 0.024
    assert res.statistic == pytest.approx((abs(30 - 14) - 1) ** 2 / 44)
    # without correction the p-value is different (0.016): the flag matters
    assert round(stats.mcnemar_chi2(30, 14, correction=False).pvalue, 3) == 0.016


def test_mcnemar_exact_one_sided_16_vs_0():
    # tab:halting_probe: 16 vs 0 exact one-sided -> p = 1.5e-5 (= 2^-16)
    res = stats.mcnemar_exact(16, 0, alternative="greater")
    assert f"{res.pvalue:.1e}" == "1.5e-05"
    assert res.pvalue == pytest.approx(2.0**-16)
    assert stats.mcnemar_exact(16, 0).pvalue == pytest.approx(2.0**-15)


def test_clopper_pearson_matches_paper_tables():
    # tab:decision_boundary 55/475 -> [8.8, 14.8]; tab:later_iter_computation 4/81 -> [1.4, 12.2]
    ci = stats.clopper_pearson_interval(55, 475)
    assert (round(100 * ci.low, 1), round(100 * ci.high, 1)) == (8.8, 14.8)
    ci = stats.proportion_interval(4, 81)
    assert (round(100 * ci.low, 1), round(100 * ci.high, 1)) == (1.4, 12.2)
    # tab:gap_distributions: 81/81 -> lower bound 95.5%
    assert round(100 * stats.clopper_pearson_interval(81, 81).low, 1) == 95.5


def test_wilson_interval_hand_value():
    # Wilson for 0/n has upper bound z^2 / (n + z^2)
    z2 = 1.959963984540054**2
    ci = stats.wilson_interval(0, 81)
    assert ci.low == pytest.approx(0.0, abs=1e-12)
    assert ci.high == pytest.approx(z2 / (81 + z2), rel=1e-9)


def test_one_sided_binomial_ci_upper_is_one():
    ci = stats.binomial_ci(913, 1000, 0.5, alternative="greater")
    assert ci.high == 1.0
    assert 0.89 < ci.low < 0.913


def test_odds_ratio_argmax_concentration():
    # tab:argmax_concentration: 251/2090 low-overlap vs 224/6489 stable -> OR = 3.82, p < 0.001
    res = stats.odds_ratio([[251, 2090 - 251], [224, 6489 - 224]])
    assert round(res.odds_ratio, 2) == 3.82
    assert res.ci.low < 3.82 < res.ci.high
    assert res.pvalue < 1e-3


def test_fisher_exact_tie_odds_ratio():
    # tab:gap_distributions: ties 22/439 (low-overlap) vs 44/81 (stable) -> OR = 0.044
    res = stats.fisher_exact([[22, 439 - 22], [44, 81 - 44]])
    assert round(res.statistic, 3) == 0.044
    assert res.pvalue < 1e-3


def test_chi2_goodness_of_fit_convergent_footnote():
    # sec:logit_dynamics (8) footnote: 60/198 all correct vs independence (101, 93, 94, 85 of 198)
    p = (101 / 198) * (93 / 198) * (94 / 198) * (85 / 198)
    res = stats.chi2_goodness_of_fit([60, 138], [198 * p, 198 * (1 - p)])
    assert round(res.statistic, 2) == 275.47
    assert f"{res.pvalue:.1e}" == "7.3e-62"


def test_chi2_independence_hand_value():
    # 2x2 without correction: chi2 = N (ad - bc)^2 / (row1 row2 col1 col2)
    table = [[10, 20], [30, 40]]
    expected = 100 * (10 * 40 - 20 * 30) ** 2 / (30 * 70 * 40 * 60)
    res = stats.chi2_independence(table, correction=False)
    assert res.statistic == pytest.approx(expected)
    assert res.df == 1


def test_mann_whitney_separates_and_not():
    assert stats.mann_whitney([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]).statistic == 0.0
    assert stats.mann_whitney([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]).pvalue < 0.01
    assert stats.mann_whitney([1, 2, 3], [1, 2, 3]).pvalue == pytest.approx(1.0)


def test_bootstrap_is_seeded_and_brackets_mean():
    rng = np.random.default_rng(0)
    data = (rng.random(198) < 54 / 198).astype(float)
    a = stats.bootstrap_ci(data, n_resamples=2000)
    b = stats.bootstrap_ci(data, n_resamples=2000)
    assert (a.low, a.high) == (b.low, b.high)
    assert a.low < data.mean() < a.high
    const = stats.bootstrap_ci(np.ones(5))
    assert (const.low, const.high) == (1.0, 1.0)


@pytest.mark.parametrize(
    "call",
    [
        lambda: stats.binomial_test(5, 3, 0.5),
        lambda: stats.binomial_test(1, 3, 1.5),
        lambda: stats.mcnemar_chi2(0, 0),
        lambda: stats.proportion_interval(1, 0),
        lambda: stats.fisher_exact([[1, 2, 3], [4, 5, 6]]),
        lambda: stats.bootstrap_ci([]),
        lambda: stats.mann_whitney([], [1.0]),
        lambda: stats.binomial_test(-1, 3, 0.5),
    ],
)
def test_bad_input_is_usage_error(call):
    with pytest.raises(UsageError):
        call()
