"""The SST model core: exact equivalences on tiny float64 models (DESIGN section 11, issue 2)."""

import math

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from sst_interp.kernels.errors import UsageError
from sst_interp.model import FixedDepth, GenerationConfig, SSTConfig, SSTModel, generate
from sst_interp.model.testing import tiny_gemma3

from tests.unit.conftest import tiny_backbone

from .conftest import make_sst


@pytest.mark.parametrize("family", ["gemma3", "llama"])
def test_blend_off_gives_exactly_the_backbone(tokenizer, family):
    reference = tiny_backbone(family)
    sst = SSTModel.from_backbone(tiny_backbone(family), SSTConfig(state_scale="hidden"))
    ids = torch.tensor([tokenizer("blend off is the backbone").input_ids])
    with torch.no_grad():
        expected = reference(ids).logits
        with sst.state_mode("off"):
            got = sst.lm_logits(sst.decoder_forward(input_ids=ids))
    assert torch.equal(got, expected)


@pytest.mark.parametrize("family", ["gemma3", "llama"])
def test_parameter_count_and_alpha_at_init(family):
    sst = make_sst(family)
    n_params = sum(p.numel() for p in sst.state_parameters())
    assert n_params == 2 * sst.num_layers * sst.hidden_size
    assert all(p.dtype == torch.float32 for p in sst.state_parameters())
    expected_alpha = 0.015 + 0.085 / (1 + math.exp(1.8))
    assert sst.config.alpha_init == pytest.approx(expected_alpha, rel=1e-12)
    torch.testing.assert_close(sst.alphas(), torch.full((sst.num_layers, sst.hidden_size), expected_alpha),
                               rtol=1e-6, atol=0)
    assert expected_alpha == pytest.approx(0.027, abs=5e-4)  # the paper: sigmoid(-1.8) ~ 0.142, alpha ~ 0.027


def test_state_parameters_stay_float32_when_the_model_is_cast():
    sst = make_sst("gemma3")
    sst.backbone.to(torch.bfloat16)
    assert sst.dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in sst.state_parameters())


def test_depth_changes_logits_only_when_the_blend_is_on(tokenizer):
    prompt = [tokenizer("iterate me").input_ids]
    config = GenerationConfig(max_new_tokens=6)
    no_stream = SSTModel.from_backbone(tiny_gemma3(), SSTConfig(layers=[]))
    assert no_stream.state_parameters() == []
    with_stream = make_sst("gemma3")

    def pass_logits(sst, depth):
        logs = {}

        class Obs:
            def on_pass_start(self, info): pass
            def on_pass_end(self, info, logits):
                if logits is not None and info.position is not None:
                    logs[(info.position, info.iteration)] = logits.clone()
            def on_token(self, *args): pass

        generate(sst, prompt, depth=depth, config=GenerationConfig(max_new_tokens=6, logits_every_iteration=True),
                 observer=Obs())
        return logs

    off = pass_logits(no_stream, 3)
    for position in range(6):
        assert torch.equal(off[(position, 1)], off[(position, 3)])
    assert generate(no_stream, prompt, 3, config).token_ids == generate(no_stream, prompt, 1, config).token_ids
    on = pass_logits(with_stream, 3)
    assert (on[(0, 1)] - on[(0, 3)]).abs().max() > 1e-3


def test_state_before_the_first_token_is_zero(tokenizer):
    sst = make_sst("llama")
    ids = torch.tensor([tokenizer("zero state").input_ids])
    states = sst.pass1_states(ids)
    for state in states.values():
        assert torch.equal(state[:, 0], torch.zeros_like(state[:, 0]))
        assert state[:, 1].abs().max() > 0
    # A one-token prompt reads the zero state in both prefill modes, so both give identical logits.
    one = [tokenizer("").input_ids]
    config = dict(max_new_tokens=3)
    two_pass = generate(sst, one, 2, GenerationConfig(prompt_mode="two_pass", **config))
    sequential = generate(sst, one, 2, GenerationConfig(prompt_mode="sequential", **config))
    assert two_pass.token_ids == sequential.token_ids


def test_padding_and_document_starts_give_zero_states(tokenizer):
    sst = make_sst("llama")
    ids = torch.tensor([tokenizer("abcdef").input_ids])
    starts = torch.zeros_like(ids, dtype=torch.bool)
    starts[0, 4] = True
    states = sst.pass1_states(ids, segment_starts=starts)
    for state in states.values():
        assert torch.equal(state[0, 4], torch.zeros_like(state[0, 4]))
        assert state[0, 5].abs().max() > 0


def _prefill_logits(sst, prompt, mode):
    logs = {}

    class Obs:
        def on_pass_start(self, info): pass
        def on_pass_end(self, info, logits):
            if info.position == 0 and info.iteration == 1:
                logs["p0"] = logits.clone()
        def on_token(self, *args): pass

    generate(sst, [prompt], 1, GenerationConfig(max_new_tokens=1, prompt_mode=mode), observer=Obs())
    return logs["p0"]


@pytest.mark.parametrize("family", ["gemma3", "llama"])
def test_two_pass_vs_sequential_difference_is_second_order_in_alpha(tokenizer, family):
    """sec:two_pass / app:approx_bound: halving alpha should divide the difference by ~4."""
    prompt = tokenizer("two pass approximation").input_ids
    diffs = []
    for scale in (1.0, 0.5, 0.25):
        sst = make_sst(family, a_min=0.015 * scale, a_max=0.10 * scale)
        diff = (_prefill_logits(sst, prompt, "two_pass") - _prefill_logits(sst, prompt, "sequential")).abs().max()
        diffs.append(float(diff))
    ratios = [diffs[0] / diffs[1], diffs[1] / diffs[2]]
    assert diffs[0] > 1e-6
    for ratio in ratios:
        assert 3.0 < ratio < 5.0, (diffs, ratios)


def test_batch_of_prompts_gives_the_same_tokens_as_each_prompt_alone(tokenizer):
    # float32: HF's eager attention makes fully padded rows NaN in float64 (its float64 mask minimum becomes -inf in
    # the float32 softmax), which would poison the batch; real backbones run in float32/bfloat16.
    for family in ("gemma3", "llama"):
        sst = make_sst(family, dtype=torch.float32)
        prompts = [tokenizer(text).input_ids for text in ("a", "a longer prompt", "mid size")]
        config = GenerationConfig(max_new_tokens=10)
        batched = generate(sst, prompts, 2, config)
        alone = [generate(sst, [p], 2, config).token_ids[0] for p in prompts]
        assert batched.token_ids == alone


def test_the_same_call_twice_gives_identical_tokens_and_hidden_states(tokenizer):
    sst = make_sst("gemma3", dtype=torch.float32)
    prompts = [tokenizer("determinism").input_ids, tokenizer("twice").input_ids]
    captured = []

    def run():
        outputs = []
        handles = [layer.register_forward_hook(lambda m, i, o: outputs.append(o.detach().clone()))
                   for layer in sst.layers]
        try:
            result = generate(sst, prompts, 3, GenerationConfig(max_new_tokens=8))
        finally:
            for handle in handles:
                handle.remove()
        captured.append(outputs)
        return result.token_ids

    assert run() == run()
    assert len(captured[0]) == len(captured[1]) > 0
    assert all(torch.equal(a, b) for a, b in zip(captured[0], captured[1]))


def test_eos_stops_a_row(tokenizer):
    sst = make_sst("llama", dtype=torch.float32)
    prompt = [tokenizer("stop").input_ids]
    free = generate(sst, prompt, 1, GenerationConfig(max_new_tokens=8)).token_ids[0]
    stop_at = free[2]
    result = generate(sst, prompt, 1, GenerationConfig(max_new_tokens=8, eos_token_ids=(stop_at,)))
    first = free.index(stop_at)
    assert result.token_ids[0] == free[: first + 1]
    assert result.stop_reasons == ["eos"]


def test_ema_linked_update_rule(tokenizer):
    sst = make_sst("llama", update="ema_linked")
    module = sst.state_modules()[0]
    previous, output = torch.randn(2, sst.hidden_size, dtype=torch.float64), torch.randn(2, sst.hidden_size,
                                                                                         dtype=torch.float64)
    alpha = module.alpha().double()
    torch.testing.assert_close(module.update(previous, output), alpha * previous + (1 - alpha) * output)
    # In carry mode the layer applies that rule: after one pass the carried state is alpha*C_prev + (1-alpha)*o.
    ids = torch.tensor([tokenizer("v").input_ids[:1]])
    carry = {index: torch.randn(1, sst.hidden_size, dtype=torch.float64) for index in sst.state_modules()}
    start = {index: state.clone() for index, state in carry.items()}
    with sst.state_mode("carry", carry=carry, capture="output") as outputs:
        sst.decoder_forward(input_ids=ids, use_cache=False)
    for index, module in sst.state_modules().items():
        a = module.alpha().double()
        torch.testing.assert_close(carry[index], a * start[index] + (1 - a) * outputs[index][:, -1])


def test_hidden_state_scale_reads_the_state_at_the_hidden_rms():
    sst = make_sst("llama", state_scale="hidden")
    module = sst.state_modules()[0]
    state = torch.randn(3, sst.hidden_size, dtype=torch.float64)
    hidden = 7.0 * torch.randn(3, sst.hidden_size, dtype=torch.float64)
    read = module.read_state(state, hidden)
    torch.testing.assert_close(read.pow(2).mean(-1).sqrt(), hidden.float().pow(2).mean(-1).sqrt(), rtol=1e-4, atol=0)
    unit = make_sst("llama", state_scale="unit").state_modules()[0].read_state(state, hidden)
    torch.testing.assert_close(unit.pow(2).mean(-1).sqrt(), torch.ones(3), rtol=1e-4, atol=0)


def test_gradients_reach_pass_one_and_the_sst_parameters(tokenizer):
    sst = make_sst("llama", dtype=torch.float32)
    ids = torch.tensor([tokenizer("gradient path").input_ids])
    seen_pass1 = []
    first_mlp = sst.layers[0].mlp.down_proj
    handle = first_mlp.weight.register_hook(lambda g: seen_pass1.append(g))
    try:
        hidden = sst.two_pass_hidden(ids)
        loss = sst.lm_logits(hidden).logsumexp(-1).mean()
        # Gradient of pass 2 only, by construction of the loss; pass 1 is reached through the shifted states.
        states = sst.pass1_states(ids)
        (state_grad,) = torch.autograd.grad(
            sst.lm_logits(_pass2(sst, ids, states)).logsumexp(-1).mean(), [states[1]], retain_graph=True)
        assert state_grad.abs().max() > 0
        loss.backward()
    finally:
        handle.remove()
    assert seen_pass1
    for param in sst.state_parameters():
        assert param.grad is not None and param.grad.abs().max() > 0


def _pass2(sst, ids, states):
    with sst.state_mode("given", given=states):
        return sst.decoder_forward(input_ids=ids, use_cache=False)


def test_unsupported_architecture_is_a_clear_error():
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32))
    with pytest.raises(UsageError, match="unsupported architecture 'gpt2'.*gemma3_text.*llama"):
        SSTModel.from_backbone(gpt2)


@pytest.mark.parametrize("depth", [0, -2])
def test_depth_below_one_is_a_usage_error(tokenizer, depth):
    sst = make_sst("llama")
    with pytest.raises(UsageError, match="depth must be at least 1"):
        generate(sst, [tokenizer("x").input_ids], depth)
    with pytest.raises(UsageError):
        FixedDepth(depth)
