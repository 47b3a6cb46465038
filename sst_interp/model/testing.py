"""Tiny random backbones and a character tokenizer, for tests and examples that must not load a real model.

The models are real transformers classes (Gemma3ForCausalLM, LlamaForCausalLM, HrmTextForCausalLM, ...) with a few
layers, a small hidden size and a small sliding window, so every code path of the real models runs, fast, in float64
if asked.
"""

from __future__ import annotations

import string

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import (
    DoryConfig,
    DoryForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    HrmTextConfig,
    HrmTextForCausalLM,
    Inkling2LoopForCausalLM,
    Inkling2LoopTextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

SPECIAL_TOKENS = ("<pad>", "<eos>", "<bos>", "<unk>")


def char_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer over printable ASCII: ids 0-3 are <pad>, <eos>, <bos>, <unk>; 100 ids in all.

    Encoding adds <bos> in front, like Gemma's tokenizer does.
    """
    chars = [c for c in string.printable if c not in "\x0b\x0c"]
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for char in chars:
        vocab.setdefault(char, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="<unk>"
    )


def _shared_sizes(num_layers: int, hidden_size: int, vocab_size: int) -> dict:
    """Config fields both tiny families share: sizes, special token ids (those of :func:`char_tokenizer`), eager."""
    return dict(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        attn_implementation="eager",
    )


def _build(model_class: type, config, dtype: torch.dtype, seed: int) -> PreTrainedModel:
    torch.manual_seed(seed)
    model = model_class(config).to(dtype)
    _randomise_norms(model, seed)
    return model.eval()


def tiny_gemma3(
    num_layers: int = 3,
    hidden_size: int = 32,
    sliding_window: int = 4,
    vocab_size: int = 128,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
) -> PreTrainedModel:
    """A random Gemma 3 text model: sliding-window layers plus a final full-attention layer, eager attention."""
    config = Gemma3TextConfig(
        **_shared_sizes(num_layers, hidden_size, vocab_size),
        head_dim=hidden_size // 2,
        sliding_window=sliding_window,
        layer_types=["sliding_attention"] * (num_layers - 1) + ["full_attention"],
        query_pre_attn_scalar=hidden_size // 2,
    )
    return _build(Gemma3ForCausalLM, config, dtype, seed)


def tiny_llama(
    num_layers: int = 3,
    hidden_size: int = 32,
    vocab_size: int = 128,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
) -> PreTrainedModel:
    """A random Llama model (the Llama-family adapter: Llama, Mistral, Qwen2, Qwen3)."""
    return _build(LlamaForCausalLM, LlamaConfig(**_shared_sizes(num_layers, hidden_size, vocab_size)), dtype, seed)


def tiny_hrm_text(
    layers_per_stack: int = 2,
    h_cycles: int = 2,
    l_cycles: int = 2,
    hidden_size: int = 32,
    vocab_size: int = 128,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
) -> PreTrainedModel:
    """A random HRM-Text model (transformers' own ``HrmTextForCausalLM``): two stacks of ``layers_per_stack`` blocks,
    ``h_cycles`` x (``l_cycles`` + 1) visits per token, causal attention (``prefix_lm`` off: prompts carry no
    instruction/response split here), eager attention.

    ``z_L_init`` and the norms have no weights to randomise; the embedding scale is the config default
    (1 / initializer_range), as in the released model."""
    sizes = _shared_sizes(layers_per_stack, hidden_size, vocab_size)
    sizes.pop("num_key_value_heads")  # HRM-Text attention is multi-head, no grouped KV
    config = HrmTextConfig(**sizes, head_dim=hidden_size // 2, H_cycles=h_cycles, L_cycles=l_cycles,
                           prefix_lm=False)
    return _build(HrmTextForCausalLM, config, dtype, seed)


def tiny_inkling2_loop(
    num_layers: int = 6,
    loop_start: int = 2,
    loop_end: int = 4,
    passes: int = 3,
    hidden_size: int = 32,
    vocab_size: int = 128,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    unpadded_vocab_size: int | None = None,
) -> PreTrainedModel:
    """A random Inkling-2 Loop text model (transformers' own ``Inkling2LoopForCausalLM``): ``num_layers`` layers
    (sliding-window, the last full attention), layers ``loop_start..loop_end-1`` looped ``passes`` times, blocks of 2
    layers for the attention residuals, 4 experts (2 per token).

    float32: its router and message gates compute in float32 whatever the model's dtype (float64 fails in the router,
    "expected m1 and m2 to have the same dtype"), so this family is exact to float32 only."""
    config = Inkling2LoopTextConfig(
        vocab_size=vocab_size, unpadded_vocab_size=unpadded_vocab_size or vocab_size, hidden_size=hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=2, num_key_value_heads=1, head_dim=hidden_size // 2, swa_num_attention_heads=2,
        swa_num_key_value_heads=1, swa_head_dim=hidden_size // 2, sliding_window_size=4, d_rel=4, rel_extent=16,
        n_layers_per_attn_res_block=2, moe_intermediate_size=hidden_size // 2, n_routed_experts=4,
        num_experts_per_tok=2, loop_layer_index_start=loop_start, loop_layer_index_end=loop_end,
        loop_num_passes=passes, loop_gate_rank=4, max_position_embeddings=512, pad_token_id=0, eos_token_id=1,
        bos_token_id=2, attn_implementation="eager")
    torch.manual_seed(seed)
    model = Inkling2LoopForCausalLM(config).to(dtype)
    _randomise_norms(model, seed)
    _randomise_zero_queries(model, seed)
    return model.eval()


def tiny_dory(
    input_layers: int = 2,
    recurrent_layers: int = 2,
    output_layers: int = 2,
    loops: int = 3,
    cache_mode: str = "per_loop",
    hidden_size: int = 32,
    vocab_size: int = 128,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
) -> PreTrainedModel:
    """A random Dory model (transformers' own ``DoryForCausalLM``): ``input_layers`` layers once, ``recurrent_layers``
    looped ``loops`` times (``recurrent_kv_cache_mode`` ``cache_mode``), ``output_layers`` once; sliding-window
    layers with every fourth full attention, eager attention.

    The nGPT rates (``lambda_*``, ``sqk``, ``s_gate``, ``logit_scale``) start as constants; random values make the
    tests see which layer and which loop a state came from."""
    num_layers = input_layers + recurrent_layers + output_layers
    config = DoryConfig(**_shared_sizes(num_layers, hidden_size, vocab_size), head_dim=hidden_size // 2,
                        sliding_window=4, n_input_layers=input_layers, n_recurrent_layers=recurrent_layers,
                        n_output_layers=output_layers, n_recurrent_loops=loops, recurrent_kv_cache_mode=cache_mode)
    torch.manual_seed(seed)
    model = DoryForCausalLM(config).to(dtype)
    generator = torch.Generator().manual_seed(seed + 3)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.rsplit(".", 1)[-1] in ("lambda_1", "lambda_2", "sqk", "s_gate", "logit_scale", "suv_gate",
                                           "suv_up"):
                scale = param.detach().abs().mean()
                param.copy_((scale * (0.5 + torch.rand(param.shape, generator=generator,
                                                       dtype=torch.float64))).to(param.dtype))
    return model.eval()


def _randomise_zero_queries(model: PreTrainedModel, seed: int) -> None:
    # The block attention residuals' queries and the message gates start at zero (a uniform mix, no message):
    # random values make the tests see which block and which pass a state came from.
    generator = torch.Generator().manual_seed(seed + 2)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("query") or "gate_proj" in name and "message" in name or "forget_gate" in name:
                param.copy_((0.5 * torch.randn(param.shape, generator=generator)).to(param.dtype))


def _randomise_norms(model: PreTrainedModel, seed: int) -> None:
    # Fresh norms are identity maps; random scales make the tests sensitive to which norm sits where.
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(0.5 * torch.rand(param.shape, generator=generator, dtype=torch.float64).to(param.dtype))
