"""Counterfactual patching on the hops organism: the counterfactual differs from its question in exactly the
rebound binding, and the live patch really moves B's answer-column state into A's row (at the last iteration the
patched row must emit exactly B's answer, on any weights)."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import HrmTextForCausalLM

from sst_interp.experiments import hops_patching
from sst_interp.experiments.hops_patching import counterfactual, flip_table, patch_by_iteration, patch_spec
from sst_interp.model.loop_model import LoopModel
from sst_interp.model.loops import native_loop
from sst_interp.organism.config import LoopedShape
from sst_interp.organism.task import HopsSpec, split_items
from sst_interp.organism.tokenizer import hops_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


def bindings(prompt: str) -> dict[str, str]:
    return dict(token.split("=") for token in prompt.split() if "=" in token)


@pytest.mark.parametrize("hop", [1, 2, 3, 4])
def test_the_counterfactual_leaves_the_path_at_the_changed_hop_only(hop):
    for question in split_items(HopsSpec(), "test", 24):
        if question.hops < hop:
            continue
        other = counterfactual(question, hop, random.Random(hop))
        a, b = bindings(question.prompt), bindings(other.prompt)
        changed = [left for left in a if a[left] != b[left]]
        assert changed == [question.chain[hop - 1]]  # exactly the j-th binding of the path
        assert other.prompt.split()[-1] == question.prompt.split()[-1]  # same query
        # B's answer: follow B's bindings from the query
        value = question.chain[0]
        while value in b:
            value = b[value]
        assert value == other.answer != question.answer


def test_a_patch_at_the_last_iteration_emits_the_source_rows_answer():
    torch.manual_seed(0)
    backbone = HrmTextForCausalLM(LoopedShape(hidden_size=16, intermediate_size=32, max_depth=3).config()).eval()
    model, tokenizer = LoopModel(backbone, native_loop("hrm_text")), hops_tokenizer()
    questions = split_items(HopsSpec(), "test", 12)
    rng = random.Random(0)
    for question in questions:
        other = counterfactual(question, 1, rng)
        with model.at_depth(3):
            clean = hops_patching.answers(model, tokenizer, [question.prompt, other.prompt], 3, None)
            last = hops_patching.answers(model, tokenizer, [question.prompt, other.prompt], 3, patch_spec(3))
        assert last == [clean[1], clean[1]]


def test_the_flip_table_counts_pairs_per_hop_and_iteration():
    torch.manual_seed(1)
    backbone = HrmTextForCausalLM(LoopedShape(hidden_size=16, intermediate_size=32, max_depth=2).config()).eval()
    model = LoopModel(backbone, native_loop("hrm_text"))
    frame = patch_by_iteration(model, hops_tokenizer(), split_items(HopsSpec(), "test", 6), 2)
    # an untrained model answers few pairs right; whatever it keeps is tabled per (hop, iteration), 2 iterations each
    table = flip_table(frame)
    assert (table["pairs"] * 2).sum() == len(frame)
    assert set(frame["iteration"]) <= {1, 2}
