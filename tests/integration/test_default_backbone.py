"""The embedded default backbone (Gemma 3 270M from the PyPI GGUF package) loads offline and generates."""

import os

import pytest
import torch

from sst_interp.model import GenerationConfig, generate
from sst_interp.model.backbone import default_backbone_dir, ensure_default_backbone
from sst_interp.model.loading import eos_token_ids

pytestmark = pytest.mark.integration


def test_default_backbone_is_cached_as_safetensors_and_loads_offline(default_sst):
    folder = ensure_default_backbone()
    assert folder == default_backbone_dir()
    assert (folder / "model.safetensors").stat().st_size > 100_000_000
    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # set by tests/conftest.py: no hub access is possible
    sst, tokenizer = default_sst
    assert type(sst.backbone).__name__ == "Gemma3ForCausalLM"
    assert (sst.num_layers, sst.hidden_size) == (18, 640)
    assert sst.config.state_scale == "hidden"


def test_default_backbone_generates_at_depths_1_and_2(default_sst):
    sst, tokenizer = default_sst
    prompt = tokenizer("The capital of France is").input_ids
    config = GenerationConfig(max_new_tokens=6, eos_token_ids=eos_token_ids(tokenizer, sst),
                              logits_every_iteration=True)
    seen = {}

    class Obs:
        def on_pass_start(self, info): pass
        def on_pass_end(self, info, logits):
            if info.position == 0:
                seen[info.iteration] = logits[0].clone()
        def on_token(self, *args): pass

    depth1 = generate(sst, [prompt], 1, config)
    depth2 = generate(sst, [prompt], 2, config, observer=Obs())
    assert len(depth1.token_ids[0]) == len(depth2.token_ids[0]) == 6
    assert all(0 <= t < sst.backbone.config.vocab_size for t in depth2.token_ids[0])
    assert tokenizer.decode(depth1.token_ids[0], skip_special_tokens=True).strip()
    # The second iteration re-runs position 0 with the carried state: its logits must move.
    assert (seen[1] - seen[2]).abs().max() > 1e-3
    assert depth1.token_ids[0][0] == int(seen[1].argmax())


def test_untrained_unit_scale_iterations_are_nearly_inert(default_sst):
    """DESIGN section 3: with the paper's unit-scale read, extra iterations of an untrained SST change no token on
    Gemma 3 (the state's RMS ~1 is tiny beside a residual stream of RMS 5-1,200), while the hidden-scale read does move
    the logits. (The blend itself still differs from the plain backbone: (1 - alpha) scales h at every layer.)"""
    sst, tokenizer = default_sst
    prompt = [tokenizer("Water boils at one hundred degrees").input_ids]
    config = GenerationConfig(max_new_tokens=5, logits_every_iteration=True)

    def position0_logits():
        seen = {}

        class Obs:
            def on_pass_start(self, info): pass
            def on_pass_end(self, info, logits):
                if info.position == 0:
                    seen[info.iteration] = logits[0].clone()
            def on_token(self, *args): pass

        tokens = generate(sst, prompt, 3, config, observer=Obs()).token_ids[0]
        return tokens, seen

    hidden_tokens, hidden_seen = position0_logits()
    for module in sst.state_modules().values():
        module.state_scale = "unit"
    try:
        unit_tokens, unit_seen = position0_logits()
        unit_depth1 = generate(sst, prompt, 1, config).token_ids[0]
    finally:
        for module in sst.state_modules().values():
            module.state_scale = "hidden"
    assert unit_tokens == unit_depth1
    unit_move = float((unit_seen[1] - unit_seen[3]).abs().max())
    hidden_move = float((hidden_seen[1] - hidden_seen[3]).abs().max())
    assert unit_move < hidden_move / 5, (unit_move, hidden_move)
