"""The shipped ``hops-overthink``: its depth-by-hop staircase, its overshoot one H-cycle past the sufficient depth, and
its MUST HALT labels, recomputed from the weights on a fixed subset of test questions.

The numbers asserted were measured on these weights (docs/organism.md, "The overthinking organism"); each assertion
fails if the organism stops showing what it was built to show: every counted question is answered at its
sufficient depth ceil(k/2); one H-cycle deeper the answer moves on along the chain where the chain runs on, to the
value the task predicts, and stays where the chain ends; so the suite's halting labels have MUST HALT questions.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sst_interp.checkpoints import resolve_model
from sst_interp.cli.record import main as record_main
from sst_interp.model.loop_model import load_loop_backbone
from sst_interp.model.loops import native_loop
from sst_interp.organism.carried import trained_spec
from sst_interp.organism.looped import answer_predictions
from sst_interp.organism.overshoot import overshoot_rows, overshoot_summary
from sst_interp.organism.tables import read_table, tally_by_hop
from sst_interp.organism.task import split_items
from sst_interp.organism.train import TABLE_FILE
from sst_interp.probe.labels import labels_from_generations
from sst_interp.store import Run

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

FOLDER = resolve_model("hops-overthink")
SPEC = trained_spec(FOLDER)
DEPTHS = range(1, 6)
SUBSET = 200  # the first 200 test questions: 50 per hop count (answers at five depths take about a second)
#: exact-match counts of those questions per depth and hop count, measured on the shipped weights
SUBSET_COUNTS = {1: {1: 50, 2: 50, 3: 0, 4: 1}, 2: {1: 36, 2: 18, 3: 49, 4: 38}, 3: {1: 16, 2: 18, 3: 12, 4: 18},
                 4: {1: 15, 2: 15, 3: 7, 4: 17}, 5: {1: 15, 2: 15, 3: 7, 4: 14}}
#: overshoot_summary of those questions, measured on the shipped weights
SUBSET_OVERSHOOT = {
    1: dict(right=50, breaks=14, as_predicted=13, plus_one=5, plus_two=8, can_break=35, ended_breaks=0),
    2: dict(right=50, breaks=32, as_predicted=31, plus_one=31, plus_two=0, can_break=32, ended_breaks=0),
    3: dict(right=49, breaks=37, as_predicted=27, plus_one=24, plus_two=3, can_break=31, ended_breaks=6),
    4: dict(right=38, breaks=22, as_predicted=16, plus_one=7, plus_two=9, can_break=19, ended_breaks=5),
}
RECORDED = 48  # the first 48 test questions, recorded at depths 1-5
#: MUST HALT timesteps of that recording, by depth, measured
MUST_HALT_BY_DEPTH = {1: 13, 2: 15}


@pytest.fixture(scope="module")
def answers():
    backbone, tokenizer = load_loop_backbone(FOLDER, native_loop("hrm_text"))
    questions = split_items(SPEC, "test", SUBSET)
    return questions, {depth: answer_predictions(backbone, tokenizer, questions, depth) for depth in DEPTHS}


def test_the_spec_it_carries_is_counted_hops_trained_at_the_sufficient_depth():
    assert SPEC.counted and SPEC.beyond == 2 and (SPEC.min_hops, SPEC.max_hops) == (1, 4)
    table = read_table(Path(FOLDER) / TABLE_FILE)
    assert sorted(table) == list(DEPTHS) and all(total == 500 for row in table.values() for _, total in row.values())


def test_the_weights_reproduce_the_subset_staircase(answers):
    questions, by_depth = answers
    counts = {depth: {h: c for h, (c, _) in tally_by_hop(questions, by_depth[depth]).items()} for depth in DEPTHS}
    assert counts == SUBSET_COUNTS
    for hops in range(1, 5):
        sufficient = SPEC.depth_of(hops)
        assert counts[sufficient][hops] >= 37  # of 50: answered at the sufficient depth
        assert all(counts[depth][hops] <= 1 for depth in DEPTHS if depth < sufficient)  # not before it
        assert all(counts[depth][hops] < counts[sufficient][hops] for depth in DEPTHS if depth > sufficient)


def test_one_cycle_deeper_the_answer_overshoots_to_the_value_the_chain_predicts(answers):
    questions, by_depth = answers
    summary = overshoot_summary(overshoot_rows(SPEC, questions, by_depth))
    assert summary == SUBSET_OVERSHOOT
    breaks = sum(cell["breaks"] for cell in summary.values())
    assert sum(cell["as_predicted"] for cell in summary.values()) >= 0.75 * breaks  # most land on hop k+1 or k+2
    assert sum(cell["ended_breaks"] for cell in summary.values()) <= 0.15 * breaks  # a chain that ends mostly holds
    assert summary[2]["breaks"] == summary[2]["can_break"]  # 2 hops: every chain that runs on breaks


def test_the_suite_labels_must_halt_questions_on_a_recording(tmp_path):
    out = tmp_path / "run"
    assert record_main(["--model", "hops-overthink", "--questions", "hops", "--source-option", f"n={RECORDED}",
                        "--depths", "1,2,3,4,5", "--device", "cpu", "--out", str(out)]) == 0
    run = Run.open(out)
    assert all("?" in p and p.split("?")[1][0].isdigit() for p in run.questions()["prompt"])  # its counted spec
    labels = labels_from_generations(run.generations())
    steps = labels.timesteps
    halting = steps[steps["must_halt"]]
    assert halting.groupby("depth").size().to_dict() == MUST_HALT_BY_DEPTH
    # the truth of why: each MUST HALT question halts at its sufficient depth, and its chain runs past the answer
    truth = run.questions().set_index("question_id")["metadata"].map(json.loads)
    for row in halting.itertuples():
        assert row.depth == SPEC.depth_of(truth[row.question_id]["hops"])
    # where the chain runs on, the answer moved along it; 4 of 28 broke although their chain ends at the answer
    assert sum(truth[q]["beyond"] > 0 for q in halting["question_id"]) == 24
