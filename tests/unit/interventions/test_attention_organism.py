"""Attention patching means something on the shipped ``hops-organism`` (docs/interventions.md, "Attention patterns").

At the answer column, iteration 1, the L block's head 0 reads hop 1's binding (``c=b`` for the query ``?c``: the
heaviest key in 48 of 48 questions, as the attention row of ``organism validate`` says). Setting that head to
attend to a distractor chain's head binding instead (``x=y``, a chain the query never reaches) hands the block the
pointer ``y``: the answer changes for most questions, mostly to the distractor chain's own digit. The controls: the
same head set to hop 1's binding (the pattern it had, made one-hot) changes nothing, and head 2 of the same block
(its heaviest key a binding off the chain in 36 of 48) set to the same distractor binding changes nothing.

Measured on the first 48 test questions (8 per hop count, all answered right at depth 4), 2026-11-29:

| head 0 -> distractor | answer changed | became the distractor's digit | head 0 -> hop 1 | head 2 -> distractor |
|---|---|---|---|---|
| all 48 | 29 (0.604) | 27 (0.562) | 0 | 0 |
| 1-4 hops (32) | 26 (0.81) | | | |

Longer chains recover (5 hops 2/8, 6 hops 1/8 changed): from iteration 2 the L block re-reads the chain and the
iterations left follow it again. The bounds asserted are below the measured fractions.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sst_interp.checkpoints import resolve_model
from sst_interp.interventions import InterventionSpec, Operation, Site
from sst_interp.interventions.loops import intervene_loop
from sst_interp.model.generation import GenerationConfig
from sst_interp.model.loop_model import LoopModel, generate_looped, load_loop_backbone
from sst_interp.model.loops import native_loop
from sst_interp.organism.task import BIND, HopsSpec, split_items
from sst_interp.organism.train import ORGANISM_FILE

pytestmark = pytest.mark.usefixtures("one_thread")

FOLDER = Path(resolve_model("hops-organism"))
SPEC = HopsSpec(**json.loads((FOLDER / ORGANISM_FILE).read_text())["task"])
DEPTH = 4
QUESTIONS = 48
L_BLOCK = 0  # the recorded layer of the L block (one block per stack, one L-cycle)


@pytest.fixture(scope="module")
def organism():
    loop = native_loop("hrm_text")
    backbone, tokenizer = load_loop_backbone(str(FOLDER), loop)
    return LoopModel(backbone, loop), tokenizer


def _answer(model: LoopModel, tokenizer, ids: list[int], spec: InterventionSpec | None = None) -> str:
    config = GenerationConfig(max_new_tokens=1, pad_token_id=int(tokenizer.pad_token_id))
    with model.at_depth(DEPTH):
        if spec is None:
            result = generate_looped(model, [ids], DEPTH, config)
        else:
            with intervene_loop(model, spec) as intervener:
                result = generate_looped(model, [ids], DEPTH, config, observer=intervener)
    return tokenizer.convert_ids_to_tokens([result.token_ids[0][0]])[0]


def _attend(head: int, key: int) -> InterventionSpec:
    """The L block's ``head`` at the answer column, iteration 1, all weight on the key position ``key``."""
    return InterventionSpec.of(Site("attention", layers=L_BLOCK, heads=head, positions=0, iterations=1),
                               Operation("set", attend_to=key))


@torch.no_grad()
def test_redirecting_the_head_that_reads_hop_1_changes_the_answer_and_a_bystander_head_does_not(organism):
    model, tokenizer = organism
    counts = {"changed": 0, "distractor": 0, "same_binding": 0, "bystander": 0, "questions": 0}
    for question in split_items(SPEC, "test", QUESTIONS):
        ids = tokenizer(question.prompt)["input_ids"]
        if _answer(model, tokenizer, ids) != question.answer:
            continue
        tokens = tokenizer.convert_ids_to_tokens(ids)
        binding = {token.split(BIND)[0]: key for key, token in enumerate(tokens) if BIND in token}
        targets = {token.split(BIND)[1] for token in tokens if BIND in token}
        # the first distractor chain's head: a variable bound but never a value, off the query's chain
        head = min(left for left in binding if left not in targets and left not in question.chain)
        redirected = _answer(model, tokenizer, ids, _attend(0, binding[head]))
        counts["questions"] += 1
        counts["changed"] += redirected != question.answer
        counts["distractor"] += redirected == question.successors[head][-1]
        same = _answer(model, tokenizer, ids, _attend(0, binding[question.chain[0]]))  # hop 1's own binding
        counts["same_binding"] += same != question.answer
        counts["bystander"] += _answer(model, tokenizer, ids, _attend(2, binding[head])) != question.answer
    assert counts["questions"] == QUESTIONS  # depth 4 answers every one of them
    assert counts["changed"] >= 24 and counts["distractor"] >= 22  # measured 29 and 27 of 48
    assert counts["same_binding"] <= 2 and counts["bystander"] <= 2  # measured 0 and 0
