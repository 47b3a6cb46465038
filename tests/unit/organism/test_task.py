"""The hops task: every question's ground truth follows from its own prompt; splits are seeded and disjoint; bad
generator parameters are one-line errors."""

from __future__ import annotations

import random

import pytest

from sst_interp.data import load_questions
from sst_interp.data.grading import grade
from sst_interp.kernels.errors import UsageError
from sst_interp.organism.task import HopsSpec, make_question, split_items
from sst_interp.organism.tokenizer import check_covers_task, hops_tokenizer, is_hops_tokenizer


def resolve(prompt: str) -> tuple[str, ...]:
    """Follow the query through the prompt's bindings, independently of the generator."""
    *pairs, query = prompt.split(" ")
    assert query.startswith("?")
    bindings = dict(pair.split("=") for pair in pairs)
    chain = [query[1:]]
    while not chain[-1].isdigit():
        chain.append(bindings[chain[-1]])
    return tuple(chain)


@pytest.mark.parametrize("hops", [1, 2, 3, 4, 6])
def test_the_stored_chain_is_the_one_the_prompt_defines(hops):
    spec = HopsSpec(bindings=10, max_hops=6, chains=3)
    rng = random.Random(hops)
    for _ in range(50):
        question = make_question(spec, rng, hops)
        assert resolve(question.prompt) == question.chain
        assert question.hops == hops == len(question.chain) - 1
        assert question.answer == question.chain[-1] == question.hop_value(hops)
        assert len(hops_tokenizer()(question.prompt)["input_ids"]) == 1 + spec.prompt_length
        body = question.prompt.split(" ")[:-1]
        assert len(body) == spec.bindings and len({b[0] for b in body}) == spec.bindings  # each bound once
        ends = [b[2] for b in body if b[2].isdigit()]
        assert len(ends) == len(set(ends)) == spec.chains  # one distinct digit per chain: chance is 1/chains
        for variable, chain in question.successors.items():
            assert resolve(question.prompt.rsplit("?", 1)[0] + f"?{variable}") == chain


def test_splits_are_deterministic_balanced_and_disjoint():
    spec = HopsSpec()
    test = split_items(spec, "test", 40)
    assert [q.prompt for q in test] == [q.prompt for q in split_items(spec, "test", 40)]
    assert [q.hops for q in test[:8]] == [1, 2, 3, 4, 5, 6, 1, 2]
    train = {q.prompt for q in split_items(spec, "train", 400)}
    assert not train & {q.prompt for q in test}
    assert [q.prompt for q in split_items(HopsSpec(seed=1), "test", 5)] != [q.prompt for q in test[:5]]


@pytest.mark.parametrize("kwargs, message", [
    (dict(min_hops=0), "at least 1 hop"),
    (dict(max_hops=9, bindings=8), "cannot hold a 9-hop chain"),
    (dict(chains=1), "give 2-10"),
    (dict(bindings=27, max_hops=4), "at most 26 variables"),
    (dict(bindings=8, variables=6), "at most 6 variables"),
])
def test_impossible_specs_are_one_line_errors(kwargs, message):
    with pytest.raises(UsageError, match=message):
        HopsSpec(**kwargs)


def test_a_split_larger_than_the_distinct_questions_is_refused():
    # 2 variables, 2 one-binding chains: 2 queries x 90 digit pairs x 2 orders = 360 distinct questions
    tiny = HopsSpec(bindings=2, max_hops=1, chains=2, variables=2)
    assert len(split_items(tiny, "test", 300)) == 300
    with pytest.raises(UsageError, match="distinct test questions"):
        split_items(tiny, "test", 361)


def test_the_source_stores_the_truth_and_the_grader_is_exact():
    questions = load_questions("hops", n=8, max_hops=4)
    assert [q.metadata["hops"] for q in questions] == [1, 2, 3, 4, 1, 2, 3, 4]
    q = questions[2]
    assert tuple(q.metadata["chain"]) == resolve(q.prompt) and q.reference == q.metadata["chain"][-1]
    wrong = str((int(q.reference) + 1) % 10)
    assert grade(q, q.reference).correct and grade(q, f" {q.reference}").correct
    assert not grade(q, wrong).correct and not grade(q, q.reference + "1").correct and not grade(q, "").correct
    with pytest.raises(UsageError, match="at least 1 hop"):
        load_questions("hops", min_hops=0)
    with pytest.raises(UsageError, match="unknown hops split"):
        load_questions("hops", split="dev")


def test_the_tokenizer_is_one_token_per_binding_and_round_trips(tmp_path):
    tokenizer = hops_tokenizer()
    prompt = load_questions("hops", n=1)[0].prompt
    ids = tokenizer(prompt)["input_ids"]
    *pairs, query = prompt.split(" ")
    assert tokenizer.convert_ids_to_tokens(ids) == ["<bos>", *pairs, "?", query[1]]
    assert tokenizer.decode(ids[1:], skip_special_tokens=True).replace("? ", "?") == prompt
    tokenizer.save_pretrained(tmp_path)
    from transformers import AutoTokenizer

    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again(prompt)["input_ids"] == ids and is_hops_tokenizer(again)
    check_covers_task(again)


def test_a_tokenizer_without_the_task_symbols_is_refused():
    from sst_interp.model.testing import char_tokenizer

    with pytest.raises(UsageError, match="no token for the hops symbols a=a"):
        check_covers_task(char_tokenizer())  # one token per character: no binding tokens
    assert not is_hops_tokenizer(char_tokenizer())
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    digits_only = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"<pad>": 0, **{str(d): d + 1 for d in range(10)}}, "<pad>")),
        pad_token="<pad>")
    with pytest.raises(UsageError, match="no token for the hops symbols"):
        check_covers_task(digits_only)
