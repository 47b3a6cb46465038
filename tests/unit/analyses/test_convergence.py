"""L2 convergence monitoring: hand cases, the planted null (deltas do not predict correctness) and a positive
control (planted deltas that do)."""

from __future__ import annotations

import numpy as np
import pytest

from sst_interp.analyses.convergence import (
    ConvergenceResult,
    convergence_from_arrays,
    convergence_monitoring,
    l2_deltas,
    step_outcomes,
)
from sst_interp.kernels.results import NotApplicable
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.outcomes import first_correct_depth as correct_depth
from sst_interp.store import Run
from sst_interp.synthetic import SyntheticSpec, write_synthetic_run

BASE = dict(n_questions=48, full_positions=3, num_layers=2, hidden_size=128, batch_questions=24, top_k=16,
            correctness_kinds={"random": 1.0}, seed=2)


@pytest.fixture(scope="module")
def null_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("conv") / "null"
    truth = write_synthetic_run(path, SyntheticSpec(**BASE))
    return truth, Run.open(path)


def test_l2_deltas_hand_case():
    values = np.array([[0.0, 0.0], [3.0, 4.0], [3.0, 4.0], [0.0, 0.0]])  # [I=4, d=2]
    assert l2_deltas(values).tolist() == [5.0, 0.0, 5.0]
    assert l2_deltas(values[None, None]).shape == (1, 1, 3)


def test_correct_depth_and_step_outcomes_hand_case():
    correct = np.array([[0, 1, 1, 0], [0, 0, 0, 0], [1, 0, 1, 1]], dtype=bool)
    assert correct_depth([1, 2, 3, 4], correct).tolist() == [2, -1, 1]
    out = step_outcomes([1, 2, 3, 4], correct)
    assert out[1].tolist() == ["improves", "same", "degrades"]
    assert out[3].tolist() == ["degrades", "same", "same"]
    assert sorted(out) == [1, 2, 3]
    assert sorted(step_outcomes([1, 2, 4], correct[:, :3])) == [1]


def test_run_deltas_equal_a_direct_computation(null_run):
    truth, run = null_run
    res = convergence_monitoring(run)
    assert isinstance(res, ConvergenceResult) and res.layer == 1
    block = next(run.hidden(4, question_ids=["syn0003"]))
    direct = np.linalg.norm(np.diff(block.values[:, :, 1, :].astype(np.float64), axis=1), axis=-1)
    np.testing.assert_allclose(res.deltas[3], direct, rtol=1e-12)
    np.testing.assert_array_equal(res.groups, correct_depth(truth.depths, truth.correct))
    outcomes = step_outcomes(truth.depths, truth.correct)
    assert res.n_improves == sum(int((outcomes[i] == "improves").sum()) for i in (2, 3))
    assert res.n_degrades == sum(int((outcomes[i] == "degrades").sum()) for i in (2, 3))


def test_planted_deltas_do_not_predict_correctness(null_run):
    _, run = null_run
    res = convergence_monitoring(run)
    assert res.n_improves >= 8 and res.n_degrades >= 8
    assert res.mann_whitney_p > 0.05
    assert abs(res.auroc_degrade - 0.5) < 0.25
    assert (res.kruskal["p_value"] > 0.01).all() and len(res.kruskal) == 3
    profile = res.profile()
    medians = profile.groupby("transition")["median"].median()
    assert medians["1->2"] > medians["2->3"] > medians["3->4"]  # every group settles the same way
    assert {"metric", "value"} == set(res.table().columns)


def test_positive_control_is_detected(tmp_path):
    path = tmp_path / "signal"
    # no basin swaps, so the deltas are the planted drift alone, larger before every degrading step
    write_synthetic_run(path, SyntheticSpec(**{**BASE, "l2_signal": 3.0, "pos0_universal": False,
                                               "position_rates": (0.0,)}))
    res = convergence_monitoring(Run.open(path))
    assert res.mann_whitney_p < 1e-3
    assert res.auroc_degrade > 0.85


def test_degenerate_runs(tmp_path, null_run):
    _, run = null_run
    with pytest.raises(UsageError):
        convergence_monitoring(run, layer=7)
    every = tmp_path / "every"
    write_synthetic_run(every, SyntheticSpec(**{**BASE, "n_questions": 4, "correctness_kinds": {"always": 1.0}}))
    res = convergence_monitoring(Run.open(every))
    assert isinstance(res, NotApplicable) and "no question changes correctness" in res.reason
    single = tmp_path / "single"
    write_synthetic_run(single, SyntheticSpec(**{**BASE, "n_questions": 2, "depths": (1,)}))
    assert isinstance(convergence_monitoring(Run.open(single)), NotApplicable)
    assert isinstance(convergence_from_arrays(np.zeros((2, 3, 0)), [1], np.ones((2, 1), bool)), NotApplicable)


def test_a_change_only_from_depth_1_to_2_is_named_not_denied():
    """Correct at depth 1 and wrong from depth 2 on: the change exists, but no delta precedes the decision at 1."""
    from sst_interp.analyses.convergence import convergence_from_arrays

    deltas = np.ones((3, 2, 3))  # [Q, P, T]: depths 1-4 give transitions 1->2, 2->3, 3->4
    correct = np.array([[True, False, False, False], [False, False, False, False], [True, True, True, True]])
    res = convergence_from_arrays(deltas, [1, 2, 3, 4], correct)
    assert isinstance(res, NotApplicable)
    assert "correctness changes only at 1->2 (1 question(s))" in res.reason
