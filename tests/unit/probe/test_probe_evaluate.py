"""The halting simulation and its tables (app:halting_eval, tab:halting_probe, tab:halting_probe_per_iter)."""

from __future__ import annotations

import numpy as np
import pytest

from sst_interp.probe.evaluate import DetectionTable, simulate_halting
from sst_interp.probe.figures import halt_signal_data
from sst_interp.probe.model import DEFAULT_THRESHOLD

T, F = True, False
HI, LO = 5.0, -5.0


def test_simulation_by_hand():
    correct = np.array(
        [
            [T, F, F, F],  # q0 regress: halts at 1 -> correct
            [T, F, F, F],  # q1 regress: never halts -> i_max wrong -> overthink
            [F, T, T, T],  # q2 recover: halts at 1 -> missed
            [F, T, F, F],  # q3 fragile: halts at 2 -> correct
            [F, F, F, F],  # q4 never: unrecoverable
            [T, T, T, T],  # q5 always: never halts -> correct at 4
            [F, F, T, F],  # q6: halts at 4 -> wrong, c=3 -> overthink
        ]
    )
    logits = np.array(
        [
            [HI, LO, LO, LO],
            [LO, LO, LO, LO],
            [HI, HI, LO, LO],
            [LO, HI, HI, LO],  # the first crossing decides; later ones do not matter
            [HI, LO, LO, LO],
            [LO, LO, LO, LO],
            [LO, LO, LO, HI],
        ]
    )
    out = simulate_halting(logits, correct)
    assert out.chosen_depth.tolist() == [1, 4, 1, 2, 1, 4, 4]
    assert out.kind.tolist() == ["correct", "overthink", "missed", "correct", "unrecoverable", "correct", "overthink"]
    assert out.key() == (3, 2, 1)
    assert out.baseline_correct == 3 and out.staged_correct == 6
    # correct + overthinks + missed = recoverable questions
    assert sum(out.key()) == out.staged_correct
    assert out.depth_breakdown()["correct"].tolist() == [1, 1, 0, 1]
    table = out.table()
    assert table["correct"].tolist() == [3, 3, 6]


def test_threshold_is_strict_and_uses_log_odds():
    correct = np.array([[T, F]])
    just_above = np.nextafter(DEFAULT_THRESHOLD, 1.0)
    assert simulate_halting(np.array([[DEFAULT_THRESHOLD, LO]]), correct).chosen_depth[0] == 2
    assert simulate_halting(np.array([[just_above, LO]]), correct).chosen_depth[0] == 1


def test_mcnemar_reproduces_paper_16_vs_0():
    # 16 questions wrong at iter 1 and right under the probe, none the reverse: p = 0.5^16 = 1.5e-5
    correct = np.array([[F, T]] * 16 + [[T, T]] * 5)
    logits = np.array([[LO, HI]] * 16 + [[HI, LO]] * 5)
    b, c, p = simulate_halting(logits, correct).mcnemar_vs_iter1()
    assert (b, c) == (16, 0)
    assert p == pytest.approx(1.5e-5, rel=0.02)


def test_detection_table_counts_and_base_rate():
    depth = np.array([1, 1, 1, 2, 2, 3])
    must_halt = np.array([T, F, F, T, F, F])
    logits = np.array([HI, HI, LO, LO, LO, HI])
    det = DetectionTable(depth, must_halt, logits)
    table = det.table()
    assert table["must_halt_total"].tolist() == [1, 1, 0, 2]
    assert table["must_halt_detected"].tolist() == [1, 0, 0, 1]
    assert table["safe_total"].tolist() == [2, 1, 1, 4]
    assert table["safe_left_alone"].tolist() == [1, 1, 0, 2]
    assert det.n_predicted_halt == 3 and det.base_prediction_rate == pytest.approx(0.5)


def test_paper_base_rate_arithmetic():
    # app:halting_loocv: 68 detected MUST HALT + 65 false positives over 357 timesteps = 133/357 = 37.3%
    must_halt = np.array([T] * 68 + [F] * 289)
    logits = np.array([HI] * 68 + [HI] * 65 + [LO] * 224)
    det = DetectionTable(np.ones(357, dtype=int), must_halt, logits)
    assert det.n_predicted_halt == 133
    assert round(det.base_prediction_rate, 3) == 0.373
    assert det.safe_left_alone == 224  # the 10-neuron probe's SAFE count in tab:halting_probe_per_iter's caption


def test_halt_signal_markers(planted, planted_probe):
    from sst_interp.probe.evaluate import evaluate_probe

    ev = evaluate_probe(planted_probe, planted)
    signal = halt_signal_data(ev, planted)
    table = signal.table()
    assert len(table) == len(planted.labels.timesteps)
    assert (table.loc[table["must_halt"], "marker"] == "detected_halt").all()
    assert (table.loc[~table["must_halt"], "marker"] == "below").all()
    summary = signal.summary().set_index("class")
    assert summary.loc["must_halt", "mean"] > DEFAULT_THRESHOLD > summary.loc["safe", "mean"]
    assert summary["gap_between_means"].iloc[0] == pytest.approx(
        summary.loc["must_halt", "mean"] - summary.loc["safe", "mean"])
    kinds = dict(zip(table["question_id"], table["question_kind"]))
    assert kinds["mh1-0"] == "must_halt" and kinds["cont-0"] == "continue" and kinds["conv-0"] == "safe"


def test_halt_signal_marks_missed_continue(planted, planted_probe):
    from sst_interp.probe.evaluate import evaluate_probe

    # Make the probe halt everything at iteration 1: continue questions then end as misses.
    ev = evaluate_probe(planted_probe, planted)
    shifted = type(ev.detection)(ev.detection.depth, ev.detection.must_halt, np.full(len(ev.detection.logits), HI))
    outcome = simulate_halting(np.full_like(ev.eval_logits, HI), planted.correct, question_ids=planted.question_ids)
    signal = halt_signal_data(type(ev)(outcome, shifted, ev.eval_logits), planted)
    table = signal.table()
    row = table[(table["question_id"] == "cont-0") & (table["depth"] == 1)].iloc[0]
    assert row["marker"] == "missed_continue"
    row = table[(table["question_id"] == "cont-0") & (table["depth"] == 2)].iloc[0]
    assert row["marker"] == "false_halt_harmless"
