"""Inkling-2 Loop through the family pipeline on a tiny random ``Inkling2LoopForCausalLM`` (6 layers, layers 2-3
looped 3 times: 10 visits per token), in float32: the family's router and message gates compute in float32
whatever the model's dtype (float64 fails in the router), so equalities with transformers' own calls are bit for bit
in float32 and the cache-versus-recompute check has a float32 tolerance.

- the loop declaration's visits are transformers' ``output_hidden_states`` order and its cache offsets;
- generation with the KV cache equals transformers' own ``generate`` at every depth, with and without recording;
- every recorded hidden state equals the same visit's output from ``output_hidden_states`` of the same call;
  layers outside the looped block hold iteration 1 only;
- the lens is the model's final norm, head and soft-cap on the looped block's output after each pass;
- cached generation equals a full recompute without a cache.
"""

from __future__ import annotations

import pytest
import torch

from sst_interp.hooks import RecordConfig, VisitRecorder
from sst_interp.model.generation import GenerationConfig
from sst_interp.model.loop_model import LoopModel, generate_looped
from sst_interp.model.loops import INKLING2_LOOP, inkling_pass, loop_for_model_type
from sst_interp.model.testing import tiny_inkling2_loop
from tests.unit.observers import KeptLogits

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = [2, 17, 40, 9, 33, 5]
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def inkling() -> LoopModel:
    return LoopModel(tiny_inkling2_loop())


def test_inkling_family_declaration_matches_transformers_layout(inkling: LoopModel) -> None:
    config = inkling.config
    assert loop_for_model_type("inkling2_loop_text") is INKLING2_LOOP
    assert inkling.num_layers == 6 and INKLING2_LOOP.iterations_per_layer(config, 3) == [1, 1, 3, 3, 1, 1]
    assert INKLING2_LOOP.visits(config, 2) == [(1, 0), (1, 1), (1, 2), (1, 3), (2, 2), (2, 3), (1, 4), (1, 5)]
    # transformers' offset of pass p >= 2 is num_hidden_layers + (p - 2) * looped - loop_start
    assert [inkling_pass(config, offset) for offset in (0, 6 + 0 * 2 - 2, 6 + 1 * 2 - 2)] == [1, 2, 3]


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_inkling_generation_equals_transformers_generate_with_and_without_recording(inkling: LoopModel,
                                                                                   depth: int) -> None:
    with inkling.at_depth(depth):
        out = inkling.backbone.generate(torch.tensor([PROMPT]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                        min_new_tokens=NEW_TOKENS, return_dict_in_generate=True, output_logits=True,
                                        pad_token_id=0, eos_token_id=None)
    tokens, logits = out.sequences[0, len(PROMPT):].tolist(), [step[0] for step in out.logits]
    plain = KeptLogits()
    result = generate_looped(inkling, [PROMPT], depth, GenerationConfig(max_new_tokens=NEW_TOKENS), observer=plain)
    assert result.token_ids[0] == tokens
    assert all(torch.equal(a, b) for a, b in zip(plain.logits, logits, strict=True))
    seen = KeptLogits()

    class Both(VisitRecorder):
        def on_pass_end(self, info, logits) -> None:  # noqa: ANN001
            seen.on_pass_end(info, logits)
            super().on_pass_end(info, logits)

    config = RecordConfig(full_positions=4, sketch_positions=4, top_k=8)
    loop = inkling.loop
    with Both(loop.visit_sites(inkling.backbone), loop.lens_sites(inkling.backbone), inkling.lens,
              inkling.hidden_size, ["q"], config) as recorder:
        recorded = generate_looped(inkling, [PROMPT], depth, GenerationConfig(max_new_tokens=NEW_TOKENS),
                                   observer=recorder)
    assert recorded.token_ids == result.token_ids
    assert all(torch.equal(a, b) for a, b in zip(seen.logits, plain.logits, strict=True))
    assert inkling.config.loop_num_passes == 3  # restored
    hidden = recorder.columns()["hidden"]
    assert len(hidden["position"]) == 4 * len(INKLING2_LOOP.visits(inkling.config, depth))
    assert sorted(set(zip(hidden["iteration"].tolist(), hidden["layer"].tolist()))) == \
        sorted(INKLING2_LOOP.visits(inkling.config, depth))


@pytest.mark.parametrize("depth", [1, 3])
def test_inkling_recorded_states_equal_output_hidden_states_and_the_lens_reads_each_pass(inkling: LoopModel,
                                                                                         depth: int) -> None:
    config = RecordConfig(full_positions=NEW_TOKENS, sketch_positions=0, top_k=8)
    with VisitRecorder.for_model(inkling, ["q"], config) as recorder:
        result = generate_looped(inkling, [PROMPT], depth, GenerationConfig(max_new_tokens=NEW_TOKENS),
                                 observer=recorder)
    columns = recorder.columns()
    hidden, logits = columns["hidden"], columns["logits"]
    recorded = {(int(p), int(i), int(l)): hidden["values"][n]
                for n, (p, i, l) in enumerate(zip(hidden["position"], hidden["iteration"], hidden["layer"]))}
    lens = {(int(p), int(i)): n for n, (p, i) in enumerate(zip(logits["position"], logits["iteration"]))}
    visits = INKLING2_LOOP.visits(inkling.config, depth)
    sequence = PROMPT + result.token_ids[0]
    backbone = inkling.backbone
    calls: dict[int, list[torch.Tensor]] = {5: [], 3: []}
    handles = [backbone.model.layers[i].register_forward_hook(
        lambda module, args, output, i=i: calls[i].append(output[0, -1])) for i in calls]
    try:
        with inkling.at_depth(depth), torch.no_grad():
            cache = None
            for position in range(NEW_TOKENS):
                ids = torch.tensor([sequence[: len(PROMPT)]]) if position == 0 else \
                    torch.tensor([[sequence[len(PROMPT) + position - 1]]])
                for kept in calls.values():
                    kept.clear()
                out = backbone(input_ids=ids, cache=cache, use_cache=True, output_hidden_states=True)
                cache = out.cache
                states = out.hidden_states
                assert len(states) == 1 + len(visits)  # 11 at depth 3 (the count)
                for n, (iteration, layer) in enumerate(visits):
                    # the last entry of output_hidden_states is transformers' final-normed state: hook it instead
                    reference = calls[5][-1] if n == len(visits) - 1 else states[1 + n][0, -1]
                    assert torch.equal(recorded[(position, iteration, layer)], reference), (position, iteration)
                for iteration in range(1, depth + 1):
                    state = calls[3][iteration - 1]  # the looped block's output after pass `iteration`
                    expected = torch.log_softmax(backbone.logit_softcap(
                        backbone.lm_head(backbone.model.norm(state)).float()), -1).topk(8)
                    row = lens[(position, iteration)]
                    assert torch.equal(logits["top_ids"][row].long(), expected.indices)
                    assert torch.allclose(logits["top_logprobs"][row], expected.values, atol=1e-6, rtol=0)
    finally:
        for handle in handles:
            handle.remove()


@pytest.mark.parametrize("depth", [1, 3])
def test_inkling_cached_generation_equals_full_recompute(inkling: LoopModel, depth: int) -> None:
    many = 12  # past the sliding window (4) and the short convolutions' state
    kept = KeptLogits()
    result = generate_looped(inkling, [PROMPT], depth, GenerationConfig(max_new_tokens=many), observer=kept)
    sequence = PROMPT + result.token_ids[0]
    with inkling.at_depth(depth), torch.no_grad():
        full = inkling.backbone(input_ids=torch.tensor([sequence[:-1]]), use_cache=False).logits[0]
    for position in range(many):
        reference = full[len(PROMPT) - 1 + position]
        assert torch.allclose(kept.logits[position], reference, atol=1e-4, rtol=1e-4), position
        assert int(reference.argmax()) == result.token_ids[0][position]
