"""The paper's backbone shape (Gemma 3 27B's text decoder) with random weights, for capacity and speed checks.

The paper trains and evaluates an SST on Gemma 3 27B: 62 decoder layers, d = 5,376, bfloat16, QLoRA NF4
(``sec:experiments``; L and d also fix the 333,312 + 333,312 SST parameters of ``app:training_setup``). Measuring
speed and memory at that shape needs the shape, not the weights: every kernel, cache and capture costs the same on
random numbers. :func:`gemma3_27b_text_config` writes the published configuration of the 27B text decoder as a
transformers config, and :func:`random_backbone` materialises it with random weights straight on the device (about
54 GB in bfloat16), so nothing is downloaded. ``num_layers`` shortens the stack for a smaller device; the layer
pattern (five sliding-window layers, then one full-attention layer) is kept.
"""

from __future__ import annotations

import re

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.paper import PAPER_HIDDEN_SIZE, PAPER_NUM_LAYERS

#: Gemma 3 27B's text decoder, as published with the model (``text_config`` of ``google/gemma-3-27b-pt``).
GEMMA3_27B_TEXT: dict = dict(
    vocab_size=262_208,
    hidden_size=PAPER_HIDDEN_SIZE,  # 5,376
    intermediate_size=21_504,
    num_hidden_layers=PAPER_NUM_LAYERS,  # 62
    num_attention_heads=32,
    num_key_value_heads=16,
    head_dim=128,
    query_pre_attn_scalar=168,  # d / heads, not head_dim: the 27B model scales queries by 168^-0.5
    sliding_window=1024,
    max_position_embeddings=131_072,
    rms_norm_eps=1e-6,
    hidden_activation="gelu_pytorch_tanh",
    final_logit_softcapping=None,
    attn_logit_softcapping=None,
    tie_word_embeddings=True,
    rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
    },
)
SLIDING_WINDOW_PATTERN = 6  # every sixth layer attends globally


def layer_types(num_layers: int) -> list[str]:
    """Gemma 3's layer pattern: layers 6, 12, ... (1-based) use full attention, the others a sliding window."""
    return ["full_attention" if (i + 1) % SLIDING_WINDOW_PATTERN == 0 else "sliding_attention"
            for i in range(num_layers)]


def gemma3_27b_text_config(num_layers: int | None = None, attn_implementation: str = "sdpa",
                           **overrides) -> Gemma3TextConfig:
    """Gemma 3 27B's text-decoder configuration; ``num_layers`` keeps only the first layers of the stack.

    ``overrides`` replace published fields (the CPU smoke run shrinks d, the FFN and the vocabulary with them, so
    that the same code runs in seconds); anything overridden is no longer the paper's shape.
    """
    fields = {**GEMMA3_27B_TEXT, **overrides}
    layers = fields["num_hidden_layers"] if num_layers is None else int(num_layers)
    if layers < 1:
        raise UsageError(f"--layers must be at least 1, got {layers}")
    fields["num_hidden_layers"] = layers
    config = Gemma3TextConfig(**fields, layer_types=layer_types(layers))
    config._attn_implementation = attn_implementation
    return config


def parameter_count(config: Gemma3TextConfig) -> int:
    """Parameters of :class:`Gemma3ForCausalLM` with ``config``, counted on the meta device (nothing allocated)."""
    with torch.device("meta"):
        model = Gemma3ForCausalLM(config)
    return sum(p.numel() for p in model.parameters())  # a tied head is one parameter, counted once


@torch.no_grad()
def random_backbone(config: Gemma3TextConfig, dtype: torch.dtype = torch.bfloat16,
                    device: str | torch.device = "cuda", seed: int = 0, std: float = 0.02) -> Gemma3ForCausalLM:
    """A :class:`Gemma3ForCausalLM` with ``config`` and random weights, built directly on ``device`` in ``dtype``.

    The module tree is made on the meta device, cast to ``dtype`` there, and only then given storage on ``device``,
    so storage is allocated once and in ``dtype`` (no float32 copy: 108 GB at the 27B shape). ``to_empty`` gives every
    parameter its own storage, so the LM head is tied to the embedding again afterwards, as the config says: the
    model has exactly :func:`parameter_count` parameters. Matrices are N(0, ``std``^2) like transformers' initialiser; norm weights are small random
    offsets (Gemma's RMSNorm scales by 1 + w), so no layer is an identity by accident. Non-persistent buffers
    (rotary frequencies, the embedding scale) are recomputed on ``device``.
    """
    with torch.device("meta"):
        model = Gemma3ForCausalLM(config)
    model.to(dtype)
    model.to_empty(device=device)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    generator = torch.Generator(device=device).manual_seed(seed)
    for name, param in model.named_parameters():
        if param.dim() >= 2:
            param.normal_(0.0, std, generator=generator)
        else:
            param.uniform_(-0.1, 0.1, generator=generator) if "norm" in name else param.zero_()
    _reset_buffers(model, device)
    return model.eval()


def _reset_buffers(model: Gemma3ForCausalLM, device: str | torch.device) -> None:
    # to_empty() leaves buffers uninitialised; a small model of the same config computes them on the CPU. Buffers
    # depend on d, head_dim, rope and the layer's type, not on the vocabulary, the FFN or the depth of the stack, so
    # a layer's buffers are those of the reference layer at the same place in the sliding/full pattern.
    with torch.device("cpu"):
        reference = dict(Gemma3ForCausalLM(_pattern_copy(model.config)).named_buffers())

    def reference_name(name: str) -> str:
        return re.sub(r"layers\.(\d+)\.", lambda m: f"layers.{int(m.group(1)) % SLIDING_WINDOW_PATTERN}.", name)

    for name, buffer in model.named_buffers():
        source = reference.get(reference_name(name))
        if source is None or source.shape != buffer.shape:
            raise RuntimeError(f"cannot recompute buffer {name} of the random backbone")
        buffer.copy_(source.to(device=device, dtype=buffer.dtype))


def _pattern_copy(config: Gemma3TextConfig) -> Gemma3TextConfig:
    """The same config with one period of the layer pattern, a tiny FFN and a tiny vocabulary."""
    small = Gemma3TextConfig.from_dict(config.to_dict())
    small.num_hidden_layers = SLIDING_WINDOW_PATTERN
    small.layer_types = layer_types(SLIDING_WINDOW_PATTERN)
    small.vocab_size = 8
    small.intermediate_size = 8
    small._attn_implementation = config._attn_implementation
    return small
