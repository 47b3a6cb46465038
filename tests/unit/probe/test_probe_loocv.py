"""LOOCV over MUST HALT questions with its binomial test, and Cover's bound (app:halting_loocv)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sst_interp.kernels.errors import UsageError
from sst_interp.probe.loocv import LoocvResult, cover_bound, loocv
from sst_interp.probe.model import ProbeConfig
from tests.unit.probe.planted import planted_data


def _result(successes: int, folds: int, base_rate: float) -> LoocvResult:
    frame = pd.DataFrame({"question_id": [f"q{i}" for i in range(folds)],
                          "success": [i < successes for i in range(folds)]})
    return LoocvResult(frame, base_rate)


def test_paper_loocv_statistics():
    # 29/48 at the base prediction rate 133/357: p = 9.4e-4, one-sided 95% CI [48.6%, 100%]
    result = _result(29, 48, 133 / 357)
    assert f"{result.p_value:.1e}" == "9.4e-04"
    low, high = result.ci
    assert round(100 * low, 1) == 48.6 and high == 1.0
    assert round(100 * result.accuracy) == 60
    # tab:halting_probe_layer_sweep: the 64-neuron probe at base rate 42.1% gives p = 0.008
    assert round(_result(29, 48, 0.421).p_value, 3) == 0.008


def test_depth_matched_null_is_poisson_binomial():
    frame = pd.DataFrame({"question_id": ["a", "b", "c"], "success": [True, True, False],
                          "null_depth_matched": [0.5, 0.5, 0.5]})
    result = LoocvResult(frame, 0.5)
    assert result.p_value_depth_matched == pytest.approx(0.5)  # P(X >= 2), X ~ Bin(3, 0.5)
    frame["null_depth_matched"] = [0.9, 0.1, 0.5]
    # P(X >= 2) = P(1,1,1) + P(1,1,0) + P(1,0,1) + P(0,1,1)
    p = 0.9 * 0.1 * 0.5 + 0.9 * 0.1 * 0.5 + 0.9 * 0.9 * 0.5 + 0.1 * 0.1 * 0.5
    assert LoocvResult(frame, 0.5).p_value_depth_matched == pytest.approx(p)


def test_cover_bound_matches_paper():
    bound = cover_bound(10, 48)
    assert bound.shatter_capacity == 11
    assert round(bound.ratio, 1) == 4.4
    # Cover's function counting: C(N, n+1) = 2 * sum_{k<=n} binom(N-1, k); every labelling of <= n+1 points is separable
    assert cover_bound(10, 11).separable_fraction == pytest.approx(1.0)
    assert cover_bound(1, 3).separable_dichotomies == 2 * (1 + 2)  # 3 points on a line: 6 of 8 dichotomies
    assert bound.separable_fraction < 1e-4


def test_planted_feature_generalises():
    data = planted_data(n_per_pattern=3, strength=20.0, noise=0.5, seed=0)
    result = loocv(data, ProbeConfig(data.hidden_size, hidden=10))
    assert result.n_folds == len(data.labels.must_halt_questions) == 12
    assert result.p_value < 0.01
    assert result.accuracy > result.base_rate
    assert set(result.folds["question_id"]) == set(data.labels.must_halt_questions)


def test_no_feature_is_not_significant():
    # Pure noise: the full probe memorises its training set, but held-out questions are chance.
    data = planted_data(n_per_pattern=3, strength=20.0, noise=8.0, plant=False, seed=1)
    result = loocv(data, ProbeConfig(data.hidden_size, hidden=10))
    assert result.n_folds == 12
    assert result.p_value > 0.05


def test_detection_criterion_and_errors():
    data = planted_data(n_per_pattern=1, strength=20.0, noise=0.5, seed=0)
    predicted = np.zeros(len(data.y), dtype=bool)
    predicted[::2] = True
    result = loocv(data, ProbeConfig(data.hidden_size, hidden=10), criterion="detection", full_predicted=predicted)
    assert result.criterion == "detection"
    assert result.base_rate == predicted.mean()
    assert result.folds["success"].tolist() == result.folds["must_halt_detected"].tolist()
    with pytest.raises(UsageError, match="criterion"):
        loocv(data, ProbeConfig(data.hidden_size), criterion="vote")  # type: ignore[arg-type]
