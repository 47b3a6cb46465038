"""Factored binding embeddings: each binding row is its free row plus its sides' shared factors, and baking the
parametrisation leaves a plain embedding that computes exactly what the parametrised one did."""

from __future__ import annotations

import torch
from torch.nn.utils import parametrize
from transformers import HrmTextForCausalLM

from sst_interp.organism.config import LoopedShape
from sst_interp.organism.embedding import bake_factored_embeddings, factor_embeddings
from sst_interp.organism.tokenizer import hops_tokenizer


def tiny_model() -> HrmTextForCausalLM:
    torch.manual_seed(0)
    return HrmTextForCausalLM(LoopedShape(hidden_size=8, intermediate_size=16, max_depth=2).config()).double()


def test_a_binding_row_is_its_sides_factors_and_shares_them_with_its_variables():
    model, ids = tiny_model(), hops_tokenizer().get_vocab()
    embedding = model.get_input_embeddings()
    factor_embeddings(embedding)
    factors = embedding.parametrizations.weight[0]
    with torch.no_grad():
        factors.left.normal_()
        factors.right.normal_()
    weight = embedding.weight
    left, right = factors.left, factors.right
    # c=b: left[c] + right[b] (its free row starts at zero); b as a token is right[b] plus its own free row
    assert torch.equal(weight[ids["c=b"]], left[2] + right[1])
    free_b = embedding.parametrizations.weight.original[ids["b"]]
    assert torch.equal(weight[ids["b"]], free_b + right[1])
    assert torch.equal(weight[ids["a=7"]], left[0] + right[26 + 7])
    # tokens without a side (the specials, "?") are their free rows alone
    assert torch.equal(weight[ids["?"]], embedding.parametrizations.weight.original[ids["?"]])


def test_baking_leaves_a_plain_embedding_with_the_same_outputs():
    model = tiny_model()
    factor_embeddings(model.get_input_embeddings())
    with torch.no_grad():
        model.get_input_embeddings().parametrizations.weight[0].right.normal_()
    ids = hops_tokenizer()("c=b a=7 b=a ?c", return_tensors="pt")["input_ids"]
    before = model(input_ids=ids).logits
    bake_factored_embeddings(model.get_input_embeddings())
    assert not parametrize.is_parametrized(model.get_input_embeddings())
    assert set(model.state_dict()) == set(tiny_model().state_dict())  # what save_pretrained writes is plain HRM-Text
    torch.testing.assert_close(model(input_ids=ids).logits, before, rtol=0, atol=0)
