"""Convergent reasoning reproduces tab:convergent_reasoning from planted GPQA correctness and traces."""

from __future__ import annotations

import pandas as pd
import pytest

from sst_interp.analyses import convergent as cv
from sst_interp.kernels.results import NotApplicable

# Flat-depth pass/fail patterns matching the paper's GPQA-Diamond counts (101, 93, 94, 85 of 198;
# 60 correct at all four depths).
GPQA_PATTERNS = {
    (1, 1, 1, 1): 60, (1, 1, 1, 0): 12, (1, 1, 0, 0): 5, (1, 0, 1, 0): 6, (1, 0, 0, 0): 7,
    (1, 1, 0, 1): 5, (1, 0, 1, 1): 6, (0, 1, 1, 1): 5, (0, 1, 0, 1): 1, (0, 1, 1, 0): 3,
    (0, 1, 0, 0): 2, (0, 0, 1, 1): 1, (0, 0, 1, 0): 1, (0, 0, 0, 1): 7, (0, 0, 0, 0): 77,
}


def planted_run(patterns=GPQA_PATTERNS, repeated_all_correct: int = 6, two_turns: bool = False) -> pd.DataFrame:
    """All-correct questions: the first ``repeated_all_correct`` repeat the depth-1 text at depth 2."""
    rows = []
    q = 0
    seen_all = 0
    for pattern, count in patterns.items():
        for _ in range(count):
            all_ok = all(pattern)
            repeat = all_ok and seen_all < repeated_all_correct
            seen_all += all_ok
            for depth, ok in enumerate(pattern, start=1):
                text_depth = 1 if (repeat and depth == 2) else depth
                turns = (0, 1) if two_turns else (0,)
                for turn in turns:
                    rows.append({"question_id": f"q{q:03d}", "depth": depth, "turn": turn,
                                 "correct": bool(ok), "text": f"trace of {q} at {text_depth}, turn {turn}"})
            q += 1
    return pd.DataFrame(rows)


def test_convergent_reasoning_reproduces_paper_table():
    res = cv.convergent_reasoning(planted_run(), n_resamples=2000)
    assert res.n == 198 and res.all_correct == 60
    assert res.convergent == 54
    assert res.unique_counts == {4: 54, 3: 6}
    t = res.table().set_index("quantity")["value"]
    assert round(t["observed convergent-reasoning rate (%)"], 2) == 27.27
    assert round(t["chance baseline (1/4)^4 (%)"], 2) == 0.39
    assert round(t["null expected count"], 2) == 0.77
    assert round(t["observed / chance ratio"], 2) == 69.82
    assert f"{res.binomial.pvalue:.2e}" == "8.02e-82"
    # footnote: chi-square against independence across depths
    assert round(res.independence.statistic, 2) == 275.47
    assert f"{res.independence.pvalue:.1e}" == "7.3e-62"
    # bootstrap interval brackets the rate and is close to the paper's [21.21%, 33.35%]
    assert 0.19 < res.rate_ci.low < 0.2727 < res.rate_ci.high < 0.36


def test_turns_join_into_one_trace():
    res = cv.convergent_reasoning(planted_run(two_turns=True), n_resamples=500)
    assert res.convergent == 54


def test_unique_trace_counts_hand_case():
    df = pd.DataFrame({"question_id": ["a"] * 3 + ["b"] * 3, "depth": [1, 2, 3] * 2, "turn": 0,
                       "correct": True, "text": ["x", "x", "y", "p", "q", "r"]})
    assert cv.unique_trace_counts(df).to_dict() == {"a": 2, "b": 3}


def test_degenerate_inputs():
    single = pd.DataFrame({"question_id": ["a", "b"], "depth": 1, "turn": 0, "correct": [True, False],
                           "text": ["x", "y"]})
    assert isinstance(cv.convergent_reasoning(single), NotApplicable)
    everything = planted_run({(1, 1, 1, 1): 10}, repeated_all_correct=0)
    res = cv.convergent_reasoning(everything, n_resamples=200)
    assert res.convergent == 10 and res.independence is None  # independence undefined at accuracy 1
    assert not res.table()["value"].isna().any()
    with pytest.raises(Exception):
        cv.convergent_reasoning(planted_run(), n_options=1)


def test_synthetic_run_convergence_matches_planted_traces(tmp_path):
    import numpy as np

    from sst_interp.store import Run
    from sst_interp.synthetic import SyntheticSpec, write_synthetic_run

    spec = SyntheticSpec(n_questions=40, depths=(1, 2, 3, 4), full_positions=2, num_layers=2, hidden_size=64,
                         top_k=8, vocab_size=512, seed=11, batch_questions=40, identical_trace_prob=0.3,
                         correctness_kinds={"always": 0.7, "never": 0.3})
    truth = write_synthetic_run(tmp_path / "run", spec)
    res = cv.convergent_reasoning(Run.open(tmp_path / "run"), n_resamples=500)
    assert res.n_options == 4  # read from the questions' choices
    distinct = np.array([len({truth.tokens[(q, d)].tobytes() for d in truth.depths}) for q in truth.question_ids])
    all_ok = truth.correct.all(1)
    assert res.all_correct == int(all_ok.sum())
    assert res.convergent == int((all_ok & (distinct == 4)).sum())
    assert 0 < res.convergent < res.all_correct  # the plant makes some traces identical
