"""The paper's backbone shape (sst_interp.model.paper_shape): Gemma 3 27B's parameter count from its published
sizes, the random backbone's buffers equal a freshly built model's, and the shrunk shape generates."""

from __future__ import annotations

import torch
from transformers import Gemma3ForCausalLM

from sst_interp.model import GenerationConfig, SSTConfig, SSTModel, generate
from sst_interp.model.paper_shape import (
    GEMMA3_27B_TEXT,
    gemma3_27b_text_config,
    layer_types,
    parameter_count,
    random_backbone,
)

SHRUNK = dict(hidden_size=32, intermediate_size=64, vocab_size=128, num_attention_heads=4, num_key_value_heads=2,
              head_dim=8, query_pre_attn_scalar=8)


def _expected_parameters(num_layers: int) -> int:
    """Gemma 3's parameters from its sizes alone: embedding (tied head), per layer q/k/v/o, q/k norms, four
    sandwich norms and the gated MLP, and the final norm."""
    f = GEMMA3_27B_TEXT
    d, heads, kv, head_dim, ffn = (f["hidden_size"], f["num_attention_heads"], f["num_key_value_heads"],
                                   f["head_dim"], f["intermediate_size"])
    attention = d * heads * head_dim * 2 + d * kv * head_dim * 2 + 2 * head_dim
    layer = attention + 4 * d + 3 * d * ffn
    return f["vocab_size"] * d + num_layers * layer + d


def test_27b_parameter_count_matches_the_published_sizes():
    assert parameter_count(gemma3_27b_text_config()) == _expected_parameters(62) == 27_009_346_304
    assert parameter_count(gemma3_27b_text_config(num_layers=4)) == _expected_parameters(4)


def test_layer_pattern_is_five_sliding_then_one_full():
    types = layer_types(62)
    assert [i for i, t in enumerate(types) if t == "full_attention"] == list(range(5, 62, 6))
    config = gemma3_27b_text_config()
    assert config.num_hidden_layers == 62 and config.hidden_size == 5376 and config.sliding_window == 1024
    assert config.rope_parameters["full_attention"]["factor"] == 8.0


def test_random_backbone_buffers_equal_a_fresh_model_and_weights_are_seeded():
    config = gemma3_27b_text_config(num_layers=7, attn_implementation="eager", **SHRUNK)
    model = random_backbone(config, torch.float32, "cpu", seed=3)
    fresh = Gemma3ForCausalLM(config)
    for (name, buffer), (_, expected) in zip(model.named_buffers(), fresh.named_buffers(), strict=True):
        assert torch.equal(buffer, expected), name
    again = random_backbone(config, torch.float32, "cpu", seed=3)
    other = random_backbone(config, torch.float32, "cpu", seed=4)
    weight = model.model.layers[6].mlp.down_proj.weight.detach()
    assert torch.equal(weight, again.model.layers[6].mlp.down_proj.weight)
    assert not torch.equal(weight, other.model.layers[6].mlp.down_proj.weight)
    assert abs(float(weight.std()) - 0.02) < 0.002
    assert model.model.norm.weight.abs().max() <= 0.1 and model.model.norm.weight.abs().max() > 0


def test_random_backbone_in_bfloat16_runs_as_an_sst():
    config = gemma3_27b_text_config(num_layers=7, **SHRUNK)
    backbone = random_backbone(config, torch.bfloat16, "cpu")
    assert {p.dtype for p in backbone.parameters()} == {torch.bfloat16}
    sst = SSTModel.from_backbone(backbone, SSTConfig())
    result = generate(sst, [[5, 6, 7, 8]], 2, GenerationConfig(max_new_tokens=4))
    assert len(result.token_ids[0]) == 4


def test_random_backbone_is_the_config_model_with_its_head_tied():
    """to_empty() gives every parameter its own storage, untying the LM head (at the 27B shape: 28.42 B parameters
    and a second 2.8 GB head read per step); the backbone must keep the config's parameter count and one tensor."""
    config = gemma3_27b_text_config(num_layers=7, **SHRUNK)
    backbone = random_backbone(config, torch.bfloat16, "cpu")
    assert backbone.lm_head.weight.data_ptr() == backbone.model.embed_tokens.weight.data_ptr()
    assert sum(p.numel() for p in backbone.parameters()) == parameter_count(config)


def test_random_backbone_never_materialises_float32(monkeypatch):
    """Storage is allocated once, already in the target dtype: to_empty on a float32 meta model allocated 108 GB at the
    27B shape before the cast to bfloat16 (CUDA out of memory on an 80 GB H100)."""
    allocated: list[set[torch.dtype]] = []
    real_to_empty = torch.nn.Module.to_empty

    def spy(module, *args, **kwargs):
        allocated.append({p.dtype for p in module.parameters()})
        return real_to_empty(module, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "to_empty", spy)
    random_backbone(gemma3_27b_text_config(num_layers=7, **SHRUNK), torch.bfloat16, "cpu")
    assert allocated == [{torch.bfloat16}]
