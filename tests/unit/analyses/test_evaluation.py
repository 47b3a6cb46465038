"""Evaluation analyses reproduce the paper's GPQA/GSM8K numbers from planted per-question correctness."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sst_interp.analyses import evaluation as ev
from sst_interp.analyses import repetition as rep
from sst_interp.kernels.results import NotApplicable
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.outcomes import staged_depth

# Per-question pass/fail patterns at flat depths 1..4 planted to match GPQA-Diamond in the paper:
# flat accuracies 101, 93, 94, 85 of 198; staged 101, 112, 114, 121; 30 regressions and 14
# recoveries between depth 1 and depth 4; 60 questions correct at all four depths.
GPQA_PATTERNS = {
    (1, 1, 1, 1): 60, (1, 1, 1, 0): 12, (1, 1, 0, 0): 5, (1, 0, 1, 0): 6, (1, 0, 0, 0): 7,
    (1, 1, 0, 1): 5, (1, 0, 1, 1): 6, (0, 1, 1, 1): 5, (0, 1, 0, 1): 1, (0, 1, 1, 0): 3,
    (0, 1, 0, 0): 2, (0, 0, 1, 1): 1, (0, 0, 1, 0): 1, (0, 0, 0, 1): 7, (0, 0, 0, 0): 77,
}


def generations_from_patterns(patterns: dict[tuple[int, ...], int], prefix: str = "q") -> pd.DataFrame:
    rows = []
    q = 0
    for pattern, count in patterns.items():
        for _ in range(count):
            for depth, ok in enumerate(pattern, start=1):
                rows.append({"question_id": f"{prefix}{q:04d}", "depth": depth, "turn": 0,
                             "correct": bool(ok), "text": f"answer {q} at depth {depth}."})
            q += 1
    return pd.DataFrame(rows)


def flat_generations(n: int, n_correct: int, depth: int = 1) -> pd.DataFrame:
    return pd.DataFrame({"question_id": [f"g{i:05d}" for i in range(n)], "depth": depth, "turn": 0,
                         "correct": np.arange(n) < n_correct})


@pytest.fixture(scope="module")
def gpqa() -> pd.DataFrame:
    return generations_from_patterns(GPQA_PATTERNS)


def test_error_correction_gsm8k_paper_value():
    assert round(100 * ev.error_correction(1250, 1282, 1319), 2) == 46.38
    assert round(100 * ev.error_correction(91, 121, 198), 2) == 28.04  # GPQA row


def test_staged_breakdown_gpqa(gpqa):
    res = ev.staged_breakdown({"GPQA-Diamond": gpqa})
    row = res.table().iloc[0]
    assert row["N"] == 198
    assert [round(row[f"stage_{d}"], 2) for d in (1, 2, 3, 4)] == [51.01, 56.57, 57.58, 61.11]
    assert round(row["capacity"], 2) == 61.11


def test_main_results_gsm8k():
    # staged stages 1263, 1281, 1282, 1282 of 1319 (95.75, 97.12, 97.19, 97.19%)
    patterns = {(1, 1, 1, 1): 1263, (0, 1, 0, 0): 18, (0, 0, 1, 1): 1, (0, 0, 0, 0): 37}
    sst = generations_from_patterns(patterns, prefix="g")
    base = pd.DataFrame({"question_id": [f"g{i:04d}" for i in range(1319)], "depth": 1, "turn": 0,
                         "correct": np.arange(1319) < 1250})
    table = ev.main_results({"GSM8K": (sst, base)}).table().iloc[0]
    assert round(table["baseline"], 2) == 94.77
    assert round(table["sst"], 2) == 97.19
    assert round(table["delta_pp"], 2) == 2.43
    assert round(table["error_correction"], 2) == 46.38
    assert table["sst_only"] + table["baseline_only"] > 0
    stages = ev.staged_breakdown({"GSM8K": sst}).table().iloc[0]
    assert [round(stages[f"stage_{d}"], 2) for d in (1, 2, 3, 4)] == [95.75, 97.12, 97.19, 97.19]


def test_main_results_baseline_all_correct_not_applicable():
    sst = flat_generations(10, 5)
    base = flat_generations(10, 10)
    assert isinstance(ev.main_results({"x": (sst, base)}), NotApplicable)


def test_overthinking_gpqa(gpqa):
    base = flat_generations(198, 91).assign(question_id=sorted(gpqa["question_id"].unique()))
    t = ev.overthinking(gpqa, baseline=base).table()
    assert not t.isna().any().any()
    vs1 = t[t.compared_with == "flat depth 1"].set_index("condition")
    assert round(vs1.loc["staged compute", "accuracy"], 2) == 61.11
    assert round(vs1.loc["staged compute", "delta_pp"], 2) == 10.10
    assert round(vs1.loc["flat depth 1", "accuracy"], 2) == 51.01
    assert round(vs1.loc["flat depth 3", "delta_pp"], 2) == -3.54
    assert round(vs1.loc["flat depth 2", "delta_pp"], 2) == -4.04
    d4 = vs1.loc["flat depth 4"]
    assert round(d4["accuracy"], 2) == 42.93 and round(d4["delta_pp"], 2) == -8.08
    assert (d4["regressions"], d4["recoveries"]) == (30, 14)
    assert round(d4["mcnemar_p_cc"], 3) == 0.024
    assert round(vs1.loc["matched baseline", "accuracy"], 2) == 45.96
    vs = t[t.compared_with == "staged compute"].iloc[0]
    assert vs["condition"] == "flat depth 4"
    assert (vs["regressions"], vs["recoveries"]) == (36, 0)
    assert round(vs["delta_pp"], 2) == -18.18
    assert vs["mcnemar_chi2"] == pytest.approx(36.0)  # (36 - 0)^2 / 36


def test_sankey_flows_gpqa(gpqa):
    res = ev.overthinking_sankey(gpqa)
    assert res.passes == (101, 93, 94, 85)
    t = res.table()
    first = t[(t.from_depth == 1) & (t.to_depth == 2)].set_index(["from_state", "to_state"])["count"]
    # pass->pass at 1->2: patterns starting (1, 1): 60 + 12 + 5 + 5 = 82
    assert first[("pass", "pass")] == 82 and first[("pass", "fail")] == 19
    assert first[("fail", "pass")] == 11 and first[("fail", "fail")] == 86
    assert t.groupby(["from_depth", "to_depth"])["count"].sum().eq(198).all()
    assert list(res.columns_table()["passes"]) == [101, 93, 94, 85]


def test_last_turn_decides_and_missing_depth_drops_question():
    df = pd.DataFrame([
        {"question_id": "a", "depth": 1, "turn": 0, "correct": False},
        {"question_id": "a", "depth": 1, "turn": 1, "correct": True},
        {"question_id": "a", "depth": 2, "turn": 0, "correct": True},
        {"question_id": "b", "depth": 1, "turn": 0, "correct": True},  # no depth 2: dropped
    ])
    m = ev.correctness_matrix(df)
    assert list(m.index) == ["a"] and m.loc["a"].tolist() == [True, True]


def test_degenerate_inputs_not_applicable():
    single = flat_generations(20, 7)
    assert isinstance(ev.staged_breakdown(single), NotApplicable)
    assert isinstance(ev.overthinking(single), NotApplicable)
    assert isinstance(ev.overthinking_sankey(single), NotApplicable)
    all_correct = generations_from_patterns({(1, 1, 1): 12})
    res = ev.overthinking(all_correct)
    assert isinstance(res, NotApplicable) and "every question correct" in res.reason
    assert ev.overthinking_sankey(all_correct).passes == (12, 12, 12)


def test_bad_generations_table_is_usage_error():
    with pytest.raises(UsageError):
        ev.correctness_matrix(pd.DataFrame({"question_id": ["a"]}))
    with pytest.raises(UsageError):
        ev.correctness_matrix(42)


def test_sentence_repetition_hand_cases():
    long_a = "This sentence is long enough to count."
    long_b = "Another sentence that is long enough."
    assert rep.sentence_repetition(f"{long_a} {long_a} {long_b}") == pytest.approx(2 / 3)
    assert rep.sentence_repetition(f"{long_a}\n{long_b}") == 0.0
    assert rep.sentence_repetition("Short. Short. Short.") == 0.0  # below 20 characters
    assert rep.sentence_repetition("") == 0.0


def test_loop_detection():
    assert rep.has_loop("Intro text. " + "I will check again. " * 10)
    assert not rep.has_loop("Intro text. " + "I will check again. " * 2)
    assert not rep.has_loop("A normal answer with no repetition at all, ending here.")


def test_repetition_table_and_mann_whitney(gpqa):
    s1, s2 = "First sentence long enough here.", "Second sentence long enough here."
    a = pd.DataFrame({"question_id": ["q1", "q1", "q2"], "text": [f"{s1} {s1}", f"{s1} {s2}", s2]})
    b = pd.DataFrame({"question_id": ["q1", "q2"], "text": [s1, "loop. " + "again and again " * 20]})
    res = rep.repetition({"a": a, "b": b}, reference="b")
    t = res.table().set_index("configuration")
    # q1: mean(1.0, 0.0) = 0.5; q2: 0.0 -> 25%
    assert t.loc["a", "sentence_repetition"] == pytest.approx(25.0)
    assert t.loc["b", "sentence_repetition"] == 0.0
    assert (t.loc["a", "loops"], t.loc["b", "loops"]) == (0, 1)
    assert 0.0 < t.loc["a", "mann_whitney_p"] <= 1.0
    staged = rep.select_staged(gpqa)
    assert len(staged) == 198
    assert staged_depth(ev.correctness_matrix(gpqa)).value_counts().to_dict() == {1: 101, 2: 11, 3: 2, 4: 84}


def test_synthetic_run_recovers_planted_correctness(tmp_path):
    from sst_interp.store import Run
    from sst_interp.synthetic import SyntheticSpec, write_synthetic_run

    spec = SyntheticSpec(n_questions=40, depths=(1, 2, 3), full_positions=2, num_layers=2, hidden_size=64,
                         top_k=8, vocab_size=512, seed=7, batch_questions=40)
    truth = write_synthetic_run(tmp_path / "run", spec)
    run = Run.open(tmp_path / "run")
    c = truth.correct  # [Q, 3]
    stages = ev.staged_breakdown({"syn": run}).table().iloc[0]
    for j, d in enumerate((1, 2, 3)):
        assert stages[f"stage_{d}"] == pytest.approx(100 * c[:, : j + 1].any(1).mean())
    t = ev.overthinking(run).table()
    t = t[t.compared_with == "flat depth 1"].set_index("condition")
    assert t.loc["flat depth 3", "regressions"] == int((c[:, 0] & ~c[:, 2]).sum())
    assert t.loc["flat depth 3", "recoveries"] == int((~c[:, 0] & c[:, 2]).sum())
    flows = ev.overthinking_sankey(run)
    assert flows.passes == tuple(int(x) for x in c.sum(0))
    assert flows.flows[0][3] == int((c[:, 0] & ~c[:, 1]).sum())  # pass -> fail at 1 -> 2


def test_the_depth_precondition_has_one_wording():
    """single_depth / depth_matrix_check: the one "needs two or more depths" check of the depth-comparing measurements."""
    import pandas as pd

    from sst_interp.kernels.results import depth_matrix_check, single_depth

    assert single_depth([1, 2], "tab:x", "x needs two or more") is None
    refused = single_depth([3], "tab:x", "x needs two or more", prefix="gsm8k: ")
    assert refused.reason == "gsm8k: run has a single depth (3); x needs two or more" and refused.measurement == "tab:x"
    assert single_depth([], "tab:x", "x needs two").reason == "run has no depth; x needs two"
    empty = depth_matrix_check(pd.DataFrame(columns=[1, 2], dtype=bool), "tab:x", "x needs two or more")
    assert empty.reason == "no question is recorded at every depth"
    one = pd.DataFrame({4: [True, False]}, index=["a", "b"])
    assert depth_matrix_check(one, "tab:x", "x needs two or more").reason.startswith("run has a single depth (4)")
    assert depth_matrix_check(pd.DataFrame({1: [True], 2: [False]}), "tab:x", "x") is None
