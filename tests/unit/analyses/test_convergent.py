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
    # the generations table does not say how many choices GPQA has: the paper's 4 is passed
    res = cv.convergent_reasoning(planted_run(), n_options=4, n_resamples=2000)
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
    res = cv.convergent_reasoning(everything, n_options=4, n_resamples=200)
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


# ------------------------------------------------------------------------------------------------ issue 44
def _synthetic_run(tmp_path, depths=(1, 2)):
    from sst_interp.store import Run
    from sst_interp.synthetic import SyntheticSpec, write_synthetic_run

    write_synthetic_run(tmp_path / "run", SyntheticSpec(n_questions=12, depths=depths, num_layers=2, hidden_size=32,
                                                        full_positions=1, top_k=8, vocab_size=256, extra_tokens=1,
                                                        batch_questions=12, halting_dims=()))
    return Run.open(tmp_path / "run")


def test_free_form_questions_get_no_four_option_chance_rate(tmp_path, monkeypatch):
    # issue 44: the demo's free-form questions ("7 + 7 =") were tested against "(1/4)^2 = 6.25%" with no note
    run = _synthetic_run(tmp_path)
    free_form = run.questions().assign(choices=[[] for _ in range(12)])
    monkeypatch.setattr(run, "questions", lambda: free_form)
    res = cv.convergent_reasoning(run, n_resamples=200)
    text = " ".join(res.table()["quantity"])
    assert res.n_options is None and res.binomial is None
    assert "chance" not in text and "binomial" not in text and "ratio" not in text
    assert "free-form" in res.no_chance
    assert cv._notes(None, res) == [f"no chance baseline or binomial test: {res.no_chance}"]


def test_the_chance_rate_comes_from_the_questions_choices(tmp_path, monkeypatch):
    run = _synthetic_run(tmp_path)
    res = cv.convergent_reasoning(run, n_resamples=200)  # the synthetic questions have 4 choices (A-D)
    assert res.n_options == 4 and "chance baseline (1/4)^2 (%)" in set(res.table()["quantity"])
    two = run.questions().assign(choices=[["yes", "no"]] * 12)
    monkeypatch.setattr(run, "questions", lambda: two)
    assert "chance baseline (1/2)^2 (%)" in set(cv.convergent_reasoning(run, n_resamples=200).table()["quantity"])
    mixed = run.questions().assign(choices=[["yes", "no"]] * 6 + [list("ABCD")] * 6)
    monkeypatch.setattr(run, "questions", lambda: mixed)
    res = cv.convergent_reasoning(run, n_resamples=200)
    assert res.n_options is None and "different numbers of choices (2, 4)" in res.no_chance


@pytest.mark.parametrize("depths", [2, 3, 4])
def test_no_impossible_trace_rows(depths):
    # issue 44: with two depths the table printed "with 0 or fewer unique text traces"
    patterns = {tuple([1] * depths): 5, tuple([0] * depths): 3}
    res = cv.convergent_reasoning(planted_run(patterns, repeated_all_correct=2), n_resamples=200)
    rows = [q for q in res.table()["quantity"] if q.startswith("with ")]
    numbers = [int(q.split()[1]) for q in rows]
    assert all(1 <= k <= depths for k in numbers), rows
    assert len(set(numbers)) == len(numbers)
    # every all-correct question is in exactly one row
    assert sum(res.table().set_index("quantity").loc[rows, "value"]) == res.all_correct == 5
