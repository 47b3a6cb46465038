"""Counted hops (the overthinking organism's task): every question's answer and overshoot values follow from its own
prompt, training asks each question only at its sufficient depth, and bad specs or flags are one-line errors."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from sst_interp.cli.organism import main as organism_main
from sst_interp.data import load_questions
from sst_interp.kernels.errors import UsageError
from sst_interp.organism.config import LoopedTrainConfig
from sst_interp.organism.looped import IGNORE_INDEX, encode_training, training_text
from sst_interp.organism.overshoot import overshoot_rows, overshoot_summary
from sst_interp.organism.task import (HopsSpec, counted_follow_ups, counted_training_item, hops_at_depth, item,
                                      make_question, split_items)
from sst_interp.organism.tokenizer import hops_tokenizer
from sst_interp.organism.train import TABLE_FILE, read_table, train_looped
from tests.unit.conftest import fails_with_one_error_line

SPEC = HopsSpec(bindings=10, max_hops=6, chains=3, counted=True, beyond=2)


def follow(prompt: str) -> tuple[int, tuple[str, ...]]:
    """(the count, the query variable's whole chain) read from a counted prompt, independently of the generator."""
    *pairs, query = prompt.split(" ")
    assert query[0] == "?" and query[1].isdigit() and len(query) == 3
    bindings = dict(pair.split("=") for pair in pairs)
    chain = [query[2]]
    while not chain[-1].isdigit():
        chain.append(bindings[chain[-1]])
    return int(query[1]), tuple(chain)


@pytest.mark.parametrize("hops", [1, 2, 5, 6])
def test_a_counted_question_answers_hop_k_and_stores_what_an_overshoot_gives(hops):
    rng, beyonds = random.Random(hops), set()
    for _ in range(60):
        question = make_question(SPEC, rng, hops)
        count, chain = follow(question.prompt)
        assert count == hops == question.hops and chain == question.chain
        assert question.answer == chain[hops] == question.hop_value(hops)
        beyonds.add(question.beyond)
        assert question.beyond == len(chain) - 1 - hops
        # one and two hops further along the chain, stopping at its digit
        assert question.overshoot(1) == chain[min(hops + 1, len(chain) - 1)]
        assert question.overshoot(2) == chain[min(hops + 2, len(chain) - 1)]
        assert (question.overshoot(1) != question.answer) == (question.beyond > 0)
        assert len(hops_tokenizer()(question.prompt)["input_ids"]) == 1 + SPEC.prompt_length == 1 + 10 + 3
    assert beyonds == {0, 1, 2}  # the chain ends at the answer, or runs one or two bindings past it


def test_a_plain_spec_draws_the_questions_it_drew_before_counted_hops():
    # the first test question of the shipped organism's spec, as every recorded hops-organism run holds it
    assert item(HopsSpec(), "test", 0).prompt == "l=s r=0 w=p s=7 p=l e=u u=r d=8 ?d"
    assert "counted" not in load_questions("hops", n=1)[0].metadata


def test_the_source_stores_the_overshoot_values():
    questions = load_questions("hops", n=12, bindings=10, counted="true", beyond=2)
    for q in questions:
        count, chain = follow(q.prompt)
        assert q.reference == chain[count] and q.metadata["chain"] == list(chain) and q.metadata["counted"] is True
        assert q.metadata["overshoot"] == [chain[min(count + 1, len(chain) - 1)], chain[min(count + 2, len(chain) - 1)]]
        assert q.metadata["beyond"] == len(chain) - 1 - count


@pytest.mark.parametrize("kwargs, message", [
    (dict(beyond=2), "counted=true with beyond"),  # beyond without counted
    (dict(counted=True, beyond=-1), "beyond is -1"),
    (dict(counted=True, max_hops=10, bindings=14), "one digit"),
    (dict(counted=True, beyond=3, bindings=10, max_hops=6), "running 3 past its count"),
])
def test_impossible_counted_specs_are_one_line_errors(kwargs, message):
    with pytest.raises(UsageError, match=message):
        HopsSpec(**kwargs)


def test_training_asks_each_question_at_its_sufficient_depth_only():
    assert [SPEC.depth_of(h) for h in range(1, 7)] == [1, 1, 2, 2, 3, 3] and SPEC.max_sufficient_depth == 3
    assert hops_at_depth(SPEC, 2, 6) == [3, 4] and hops_at_depth(SPEC, 3, 5) == [5] and hops_at_depth(SPEC, 3, 4) == []
    rng = random.Random(0)
    for depth in (1, 2, 3):
        for index in range(40):
            question = counted_training_item(SPEC, index, depth, 6)
            assert SPEC.depth_of(question.hops) == depth
            for variable, k in counted_follow_ups(question, rng, 4, hops_at_depth(SPEC, depth, 6)):
                assert SPEC.depth_of(k) == depth and len(question.successors[variable]) - 1 >= k
    with pytest.raises(UsageError, match="sufficient depth 3"):
        counted_training_item(SPEC, 0, 3, 4)


def test_counted_training_sequences_label_the_answer_after_each_query_variable():
    question = counted_training_item(SPEC, 7, 2, 6)
    follow_ups = [(question.chain[0], 3), (question.chain[1], 3)]
    text = training_text(question, follow_ups)
    assert text.startswith(question.prompt + question.answer + " ?3" + question.chain[0] + question.chain[3])
    tokenizer = hops_tokenizer()
    input_ids, labels = encode_training(tokenizer, [text])
    tokens = tokenizer.convert_ids_to_tokens(input_ids[0].tolist())
    columns = (labels[0] != IGNORE_INDEX).nonzero().flatten().tolist()
    assert len(columns) == 3 and all(tokens[c - 2] == "?" and tokens[c - 1].isdigit() for c in columns)
    assert [tokenizer.convert_ids_to_tokens(int(labels[0, c])) for c in columns] == \
        [question.answer, question.successors[question.chain[0]][3], question.successors[question.chain[1]][3]]


def tiny(out, **changes) -> LoopedTrainConfig:
    return replace(LoopedTrainConfig(out=out, steps=4, batch_size=4, hidden_size=8, max_depth=3, test_size=12,
                                     follow_ups=1, bindings=10, counted=True, beyond=2, table_depth=5), **changes)


@pytest.mark.usefixtures("one_thread")
def test_a_counted_run_records_its_spec_and_tables_the_untrained_depths(tmp_path):
    out = tmp_path / "organism"
    train_looped(tiny(out))
    kept = json.loads((out / "organism.json").read_text())
    assert kept["task"]["counted"] is True and kept["task"]["beyond"] == 2 and kept["train"]["counted"] is True
    assert sorted(read_table(out / TABLE_FILE)) == [1, 2, 3, 4, 5]  # --table-depth: past the trained depths
    depths = [int(line.split(",")[1]) for line in (out / "train_log.csv").read_text().splitlines()[1:]]
    assert set(depths) <= {1}  # the curriculum's first ceiling (2 hops) is asked at depth 1 only
    # --init from it: the same weights to start from, trained on
    again = tmp_path / "again"
    train_looped(tiny(again, init=str(out), factored_embeddings=False, steps=1))
    assert json.loads((again / "organism.json").read_text())["train"]["init"] == str(out)


def test_a_plain_config_records_what_it_recorded_before_counted_hops(tmp_path):
    recorded = LoopedTrainConfig(out=tmp_path).recorded()
    assert not {"counted", "beyond", "init", "table_depth"} & set(recorded)  # an old folder still resumes


@pytest.mark.parametrize("flags, phrase", [
    (["--counted", "--beyond", "2", "--bindings", "10", "--max-depth", "2"], "--max-depth 2 is below"),
    (["--init", "hops-organism"], "add --no-factored-embeddings"),
    (["--init", "demo-codeact", "--no-factored-embeddings"], "not an organism folder"),
    (["--table-depth", "0"], "--table-depth must be at least 1"),
])
def test_bad_counted_or_init_flags_are_one_error_line_with_nothing_written(tmp_path, capsys, flags, phrase):
    out = tmp_path / "organism"
    fails_with_one_error_line(capsys, organism_main, ["train", "--out", str(out), *flags], phrase)
    assert not out.exists()


def test_train_sst_refuses_the_looped_only_flags_with_nothing_written(tmp_path, capsys):
    out = tmp_path / "sst"
    fails_with_one_error_line(capsys, organism_main, ["train-sst", "--out", str(out), "--counted", "--beyond", "2",
                                                      "--bindings", "10", "--max-depth", "3"],
                              "--counted: train-sst trains the plain hops task")
    assert not out.exists()


@pytest.mark.usefixtures("one_thread")
def test_an_init_of_another_shape_is_refused_with_nothing_written(tmp_path, capsys):
    out = tmp_path / "organism"
    fails_with_one_error_line(capsys, organism_main, ["train", "--out", str(out), "--init", "hops-organism",
                                                      "--no-factored-embeddings", "--hidden-size", "8"],
                              "of another shape")
    assert not out.exists()


def test_overshoot_rows_read_which_hop_each_answer_is_and_count_the_predicted_breaks():
    rng = random.Random(3)
    questions = [make_question(SPEC, rng, hops) for hops in (2, 2, 2, 3, 3, 4)]
    beyond = [q.beyond for q in questions]
    stray = "?"  # no value of any chain
    # depth 1 answers the 2-hop questions, depth 2 the others; one cycle deeper: hold, overshoot by 1, by 2, a stray
    at_1 = [questions[0].answer, questions[1].answer, questions[2].answer, stray, stray, stray]
    at_2 = [questions[0].answer, questions[1].overshoot(1), questions[2].overshoot(2), questions[3].answer,
            questions[4].chain[0], questions[5].answer]
    at_3 = [stray, stray, stray, questions[3].overshoot(1), questions[4].answer, stray]
    rows = overshoot_rows(SPEC, questions, {1: at_1, 2: at_2, 3: at_3})
    assert [row.depth for row in rows] == [1, 1, 1, 2, 2, 2]
    assert [row.at_depth for row in rows] == [2, 2, 2, 3, 0, 4]
    assert [row.deeper for row in rows] == [2, 2 + min(1, beyond[1]), 2 + min(2, beyond[2]), 3 + min(1, beyond[3]),
                                            3, None]
    assert [row.breaks for row in rows] == [False, beyond[1] > 0, beyond[2] > 0, beyond[3] > 0, False, True]
    assert [row.as_predicted for row in rows] == [False, beyond[1] > 0, beyond[2] > 0, beyond[3] > 0, False, False]
    summary = overshoot_summary(rows)
    assert {h: cell["right"] for h, cell in summary.items()} == {2: 3, 3: 1, 4: 1}
    assert summary[4] == dict(right=1, breaks=1, as_predicted=0, plus_one=0, plus_two=0, can_break=int(beyond[5] > 0),
                              ended_breaks=int(beyond[5] == 0))
    assert summary[2]["plus_one"] == int(beyond[1] > 0) + int(beyond[2] == 1)
    assert summary[2]["plus_two"] == int(beyond[2] == 2)
    # the task's rule: a chain that ends at the answer cannot overshoot, one that runs on can
    assert overshoot_rows(SPEC, questions[:1], {1: at_1[:1], 2: [questions[0].overshoot(2)]})[0].breaks == \
        (beyond[0] > 0)
