"""A toy looped model built the way Huginn/Raven is (tests only; loaded as a folder's remote code): a prelude, a core
repeated ``config.mean_recurrence`` times with the prelude's output injected into every repeat through an adapter,
a coda, a final norm and a head. Every block call has its own KV cache entry, so decoding with the cache equals a
recompute; ``output_hidden_states`` returns every block's output in call order."""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_toy_huginn import ToyHuginnConfig


class ToyBlock(nn.Module):
    """Pre-norm causal self-attention and MLP."""

    def __init__(self, config: ToyHuginnConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.heads = config.num_attention_heads
        self.norm_1, self.norm_2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d, bias=False), nn.GELU(), nn.Linear(2 * d, d, bias=False))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, cache: dict, slot: int) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm_1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if slot in cache:
            k, v = torch.cat([cache[slot][0], k], 2), torch.cat([cache[slot][1], v], 2)
        cache[slot] = (k, v)
        attention = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.out(attention.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm_2(x))


class ToyHuginnForCausalLM(PreTrainedModel):
    """The toy model: ``prelude``, ``core_block`` (looped), ``coda``, ``ln_f``, ``lm_head`` (and ``spare``, never
    called)."""

    config_class = ToyHuginnConfig
    base_model_prefix = "transformer"

    def __init__(self, config: ToyHuginnConfig) -> None:
        super().__init__(config)
        d = config.hidden_size
        self.wte, self.wpe = nn.Embedding(config.vocab_size, d), nn.Embedding(config.max_position_embeddings, d)
        self.prelude = nn.ModuleList(ToyBlock(config) for _ in range(config.n_prelude))
        self.adapter = nn.Linear(2 * d, d, bias=False)
        self.core_block = nn.ModuleList(ToyBlock(config) for _ in range(config.n_core))
        self.coda = nn.ModuleList(ToyBlock(config) for _ in range(config.n_coda))
        self.ln_f = nn.RMSNorm(d)
        self.lm_head = nn.Linear(d, config.vocab_size, bias=False)
        # blocks the forward never calls (none unless the config asks): a declaration may name them by mistake
        self.spare = nn.ModuleList(ToyBlock(config) for _ in range(config.n_spare))
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.wte

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.2)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, cache: dict | None = None, use_cache: bool = False,
                logits_to_keep: int = 0, output_hidden_states: bool = False, **kwargs) -> CausalLMOutputWithPast:
        cache = {} if cache is None else cache
        past = cache[0][0].shape[2] if 0 in cache else 0
        b, t = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(past, past + t, device=input_ids.device)[None].expand(b, t)
        if attention_mask is None:
            attention_mask = torch.ones(b, past + t, dtype=torch.long, device=input_ids.device)
        causal = torch.ones(t, past + t, dtype=torch.bool, device=input_ids.device).tril(past)
        mask = causal[None, None] & attention_mask[:, None, None, :].bool()
        x = self.wte(input_ids) + self.wpe(position_ids)
        states, slot = [], 0
        for block in self.prelude:
            x = block(x, mask, cache, slot)
            states, slot = states + [x], slot + 1
        injected, s = x, torch.zeros_like(x)
        for _ in range(int(self.config.mean_recurrence)):
            s = self.adapter(torch.cat([s, injected], -1))
            for block in self.core_block:
                s = block(s, mask, cache, slot)
                states, slot = states + [s], slot + 1
        x = s
        for block in self.coda:
            x = block(x, mask, cache, slot)
            states, slot = states + [x], slot + 1
        logits = self.lm_head(self.ln_f(x[:, -logits_to_keep:] if logits_to_keep else x))
        return CausalLMOutputWithPast(logits=logits, cache=cache if use_cache else None,
                                      hidden_states=tuple(states) if output_hidden_states else None)
