"""Dory through the family pipeline on a tiny random ``DoryForCausalLM`` (2 input layers, 2 recurrent layers looped
3 times, 2 output layers: 10 visits per token), in float64, in both KV cache modes (``per_loop``: each loop its own
cache; ``last_loop``: earlier loops read the last loop's):

- the declaration's visits are transformers' ``output_hidden_states`` order;
- generation with the KV cache equals transformers' own ``generate`` at every depth, with and without recording;
- every recorded hidden state equals the same visit's output from ``output_hidden_states`` of the same call, and
  the lens is the model's final norm and head on the recurrent section's output after each loop;
- cached generation equals a full recompute without a cache.
"""

from __future__ import annotations

import pytest
import torch

from sst_interp.hooks import RecordConfig, VisitRecorder
from sst_interp.model.generation import GenerationConfig
from sst_interp.model.loop_model import LoopModel, generate_looped
from sst_interp.model.loops import DORY_LOOP, loop_for_model_type
from sst_interp.model.testing import tiny_dory
from tests.unit.observers import KeptLogits

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = [2, 17, 40, 9, 33, 5]
NEW_TOKENS = 8
MODES = ["per_loop", "last_loop"]


@pytest.fixture(scope="module", params=MODES)
def dory(request: pytest.FixtureRequest) -> LoopModel:
    return LoopModel(tiny_dory(cache_mode=request.param))


def test_dory_family_declaration_matches_transformers_layout(dory: LoopModel) -> None:
    config = dory.config
    assert loop_for_model_type("dory") is DORY_LOOP and dory.loop is DORY_LOOP
    assert DORY_LOOP.iterations_per_layer(config, 3) == [1, 1, 3, 3, 1, 1]
    assert DORY_LOOP.visits(config, 2) == [(1, 0), (1, 1), (1, 2), (1, 3), (2, 2), (2, 3), (1, 4), (1, 5)]
    assert DORY_LOOP.describe(config, [1])["settings"] == {"recurrent_kv_cache_mode": config.recurrent_kv_cache_mode}


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_dory_generation_equals_transformers_generate_with_and_without_recording(dory: LoopModel,
                                                                                depth: int) -> None:
    with dory.at_depth(depth):
        out = dory.backbone.generate(torch.tensor([PROMPT]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                     min_new_tokens=NEW_TOKENS, return_dict_in_generate=True, output_logits=True,
                                     pad_token_id=0, eos_token_id=None)
    tokens, logits = out.sequences[0, len(PROMPT):].tolist(), [step[0] for step in out.logits]
    plain = KeptLogits()
    result = generate_looped(dory, [PROMPT], depth, GenerationConfig(max_new_tokens=NEW_TOKENS), observer=plain)
    assert result.token_ids[0] == tokens
    assert all(torch.equal(a, b) for a, b in zip(plain.logits, logits, strict=True))
    config = RecordConfig(full_positions=4, sketch_positions=4, top_k=8)
    with VisitRecorder.for_model(dory, ["q"], config) as recorder:
        recorded = generate_looped(dory, [PROMPT], depth, GenerationConfig(max_new_tokens=NEW_TOKENS),
                                   observer=recorder)
    assert recorded.token_ids == result.token_ids
    assert dory.config.n_recurrent_loops == 3  # restored
    hidden = recorder.columns()["hidden"]
    assert len(hidden["position"]) == 4 * len(DORY_LOOP.visits(dory.config, depth))
    assert sorted(set(zip(hidden["iteration"].tolist(), hidden["layer"].tolist()))) == \
        sorted(DORY_LOOP.visits(dory.config, depth))


@pytest.mark.parametrize("depth", [1, 3])
def test_dory_recorded_states_equal_output_hidden_states_and_the_lens_reads_each_loop(dory: LoopModel,
                                                                                      depth: int) -> None:
    config = RecordConfig(full_positions=NEW_TOKENS, sketch_positions=0, top_k=8)
    with VisitRecorder.for_model(dory, ["q"], config) as recorder:
        result = generate_looped(dory, [PROMPT], depth, GenerationConfig(max_new_tokens=NEW_TOKENS),
                                 observer=recorder)
    columns = recorder.columns()
    hidden, logits = columns["hidden"], columns["logits"]
    recorded = {(int(p), int(i), int(l)): hidden["values"][n]
                for n, (p, i, l) in enumerate(zip(hidden["position"], hidden["iteration"], hidden["layer"]))}
    lens = {(int(p), int(i)): n for n, (p, i) in enumerate(zip(logits["position"], logits["iteration"]))}
    assert sorted(lens) == [(p, i) for p in range(NEW_TOKENS) for i in range(1, depth + 1)]
    visits = DORY_LOOP.visits(dory.config, depth)
    sequence = PROMPT + result.token_ids[0]
    backbone = dory.backbone
    calls: dict[int, list[torch.Tensor]] = {5: [], 3: []}
    handles = [backbone.model.layers[i].register_forward_hook(
        lambda module, args, output, i=i: calls[i].append(output[0, -1])) for i in calls]
    try:
        with dory.at_depth(depth), torch.no_grad():
            cache = None
            for position in range(NEW_TOKENS):
                ids = torch.tensor([sequence[: len(PROMPT)]]) if position == 0 else \
                    torch.tensor([[sequence[len(PROMPT) + position - 1]]])
                for kept in calls.values():
                    kept.clear()
                out = backbone(input_ids=ids, cache=cache, use_cache=True, output_hidden_states=True)
                cache = out.cache
                states = out.hidden_states
                assert len(states) == 1 + len(visits)
                for n, (iteration, layer) in enumerate(visits):
                    # the last entry of output_hidden_states is transformers' final-normed state: hook it instead
                    reference = calls[5][-1] if n == len(visits) - 1 else states[1 + n][0, -1]
                    # stored as float32 (the run dtype): the float64 visit rounded once
                    assert torch.equal(recorded[(position, iteration, layer)], reference.float()), (position, iteration)
                for iteration in range(1, depth + 1):
                    state = calls[3][iteration - 1]  # the recurrent section's output after loop `iteration`
                    expected = torch.log_softmax(backbone.lm_head(backbone.model.norm(state)).double(), -1).topk(8)
                    row = lens[(position, iteration)]
                    assert torch.equal(logits["top_ids"][row].long(), expected.indices)
                    assert torch.allclose(logits["top_logprobs"][row].double(), expected.values, atol=1e-6, rtol=0)
    finally:
        for handle in handles:
            handle.remove()


@pytest.mark.parametrize("depth", [1, 3])
def test_dory_cached_generation_equals_full_recompute(dory: LoopModel, depth: int) -> None:
    """per_loop (and any mode at one loop) equals a recompute without a cache; last_loop at 3 loops does not, by
    design: its earlier loops read the last loop's cached keys of past positions, which a recompute has no cache
    to hold (transformers' own generate is its reference, above)."""
    many = 12  # past the sliding window (4)
    kept = KeptLogits()
    result = generate_looped(dory, [PROMPT], depth, GenerationConfig(max_new_tokens=many), observer=kept)
    sequence = PROMPT + result.token_ids[0]
    with dory.at_depth(depth), torch.no_grad():
        full = dory.backbone(input_ids=torch.tensor([sequence[:-1]]), use_cache=False).logits[0]
    # DoryLMHead returns float32 logits whatever the model's dtype: a float32 tolerance
    close = [torch.allclose(kept.logits[position], full[len(PROMPT) - 1 + position], atol=1e-6, rtol=1e-5)
             for position in range(many)]
    if dory.config.recurrent_kv_cache_mode == "last_loop" and depth > 1:
        assert close[0] and not all(close[1:])  # the prefill has no past; later positions read the last loop's
        return
    assert all(close), close
    assert [int(full[len(PROMPT) - 1 + p].argmax()) for p in range(many)] == result.token_ids[0]
