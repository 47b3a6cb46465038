"""Iterative decoding with the DynamicCache crop protocol equals a from-scratch recompute (DESIGN section 11)."""

import pytest
import torch

from sst_interp.model import GenerationConfig, generate

from .conftest import make_sst
from .reference import reference_decode


class LogitLog:
    """Observer keeping the logits of every pass by (position, iteration)."""

    def __init__(self):
        self.logits = {}

    def on_pass_start(self, info):
        pass

    def on_pass_end(self, info, logits):
        if info.position is not None and logits is not None:
            self.logits[(info.position, info.iteration)] = logits[0].clone()

    def on_token(self, position, token_ids, active):
        pass


@pytest.mark.parametrize("family", ["gemma3", "llama"])
@pytest.mark.parametrize("depth", [1, 3])
@pytest.mark.parametrize("prompt_mode", ["sequential", "two_pass"])
def test_cached_iterative_decode_matches_full_recompute(tokenizer, family, depth, prompt_mode):
    sst = make_sst(family)
    prompt = tokenizer("state stream").input_ids  # 13 tokens: past the sliding window of 4
    new_tokens = 9
    log = LogitLog()
    config = GenerationConfig(max_new_tokens=new_tokens, prompt_mode=prompt_mode, logits_every_iteration=True)
    result = generate(sst, [prompt], depth=depth, config=config, observer=log)
    ref_tokens, ref_logits = reference_decode(sst, prompt, depth, new_tokens, prompt_mode)

    assert result.token_ids[0] == ref_tokens
    assert set(log.logits) == set(ref_logits) == {(p, i) for p in range(new_tokens) for i in range(1, depth + 1)}
    # The backbones' eager attention computes its softmax in float32 even in a float64 model, so cached and
    # from-scratch passes agree to float32 rounding (~1e-7), not to float64; a stale or missing KV entry or a wrong
    # state moves logits by > 1e-4 (see test_reference_is_sensitive_to_a_wrong_state).
    for key, expected in ref_logits.items():
        torch.testing.assert_close(log.logits[key], expected, rtol=0, atol=1e-6)
    assert len(prompt) + new_tokens > 2 * sst.backbone.config.sliding_window if family == "gemma3" else True


def test_reference_is_sensitive_to_a_wrong_state(tokenizer):
    """Guard for the reference itself: had the cache kept a stale KV entry, logits would differ measurably."""
    sst = make_sst("gemma3")
    prompt = tokenizer("state stream").input_ids
    _, logits_d1 = reference_decode(sst, prompt, 1, 4, "sequential")
    _, logits_d3 = reference_decode(sst, prompt, 3, 4, "sequential")
    assert (logits_d1[(3, 1)] - logits_d3[(3, 3)]).abs().max() > 1e-4
