"""The sign test's exact power and the questions an experiment would need (sst_interp.experiments.power), checked
against an independent enumeration with scipy's own exact binomial test, and on the tables' planning column."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binom, binomtest

from sst_interp.experiments.effects import planned_questions
from sst_interp.experiments.power import (
    counted_questions_needed,
    questions_needed,
    sign_test_power,
)
from sst_interp.experiments.tables import FLIP_POWER_COLUMN, POWER_COLUMN


def enumerated_power(p_up: float, n: int, alpha: float) -> float:
    """Power by brute force: every count of ups, kept where scipy's exact two-sided binomial test rejects."""
    return sum(binom.pmf(k, n, p_up) for k in range(n + 1) if binomtest(k, n, 0.5).pvalue <= alpha)


@pytest.mark.parametrize(("p_up", "n", "alpha"), [(0.7, 10, 0.05), (0.7, 25, 0.05), (0.2, 31, 0.01),
                                                  (0.55, 60, 0.05 / 3), (0.9, 5, 0.05)])
def test_the_exact_power_equals_scipys_test_enumerated(p_up, n, alpha):
    assert sign_test_power(p_up, n, alpha)[0] == pytest.approx(enumerated_power(p_up, n, alpha), abs=1e-12)


def test_a_sure_effect_needs_six_questions_at_five_percent():
    # all up: the test rejects once 2 / 2^n <= 0.05, i.e. from n = 6 (2 / 64) and not at n = 5 (2 / 32 = 0.0625)
    assert counted_questions_needed(1.0) == 6
    assert counted_questions_needed(0.0) == 6
    assert counted_questions_needed(1.0, alpha=0.01) == 8  # 2 / 256 <= 0.01 < 2 / 128


def test_the_count_is_where_the_power_reaches_the_target_and_stays():
    n = int(counted_questions_needed(0.7))
    powers = sign_test_power(0.7, np.arange(1, 4 * n), 0.05)
    assert powers[n - 2] < 0.8 and (powers[n - 1:] >= 0.8).all()
    assert enumerated_power(0.7, n, 0.05) >= 0.8 > enumerated_power(0.7, n - 1, 0.05)


def test_no_effect_has_no_sample_size_and_bad_input_is_refused():
    assert math.isnan(counted_questions_needed(0.5))
    assert math.isnan(questions_needed(3, 3, 10))
    assert math.isnan(questions_needed(0, 0, 10))
    with pytest.raises(ValueError, match="p_up"):
        counted_questions_needed(1.5)
    with pytest.raises(ValueError, match="questions"):
        questions_needed(5, 5, 8)


def test_questions_scale_by_the_counted_share_and_plan_at_alpha_over_cells():
    # 9 up and 3 down among 24 questions (12 ties): twice the counted questions, planned at 0.05 / 3
    assert questions_needed(9, 3, 24, cells=3) == math.ceil(2 * counted_questions_needed(0.75, 0.05 / 3))
    assert questions_needed(9, 3, 24, cells=3) > questions_needed(9, 3, 24, cells=1)


def test_the_tables_planning_column_fills_the_sweep_cells_only():
    table = pd.DataFrame({"condition": ["clean", "a", "b"], "logprob_sign_up": [0, 8, 4],
                          "logprob_sign_n": [0, 8, 8], "logprob_compared": [8, 8, 8], "logprob_censored": [0, 0, 0],
                          "n_questions": [8, 8, 8], "broken": [0, 1, 2], "fixed": [0, 1, 0], POWER_COLUMN: np.nan,
                          FLIP_POWER_COLUMN: np.nan})
    out = planned_questions(table, table["condition"] != "clean")
    assert math.isnan(out.loc[0, POWER_COLUMN]) and math.isnan(out.loc[2, POWER_COLUMN])  # reference; 4 up, 4 down
    assert out.loc[1, POWER_COLUMN] == counted_questions_needed(1.0, 0.05 / 2)
    # flips: a is 1 fixed against 1 broken (no direction); b is 2 broken of 8, so 4x the counted questions
    assert math.isnan(out.loc[0, FLIP_POWER_COLUMN]) and math.isnan(out.loc[1, FLIP_POWER_COLUMN])
    assert out.loc[2, FLIP_POWER_COLUMN] == 4 * counted_questions_needed(0.0, 0.05 / 2)
