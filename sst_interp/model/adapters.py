"""Architecture adapters: where a family keeps its decoder layers and how one layer splits in two halves.

Each adapter is declarative: the submodule names a layer must have, and the two
halves of the layer around the blend point (post-attention, pre-FFN; paper eq:post_attn and eq:ffn):

Gemma 3 (sandwich norms)::

    h = x + post_attention_layernorm(self_attn(input_layernorm(x)))
    o = h~ + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h~)))

Llama family (Llama, Mistral, Qwen2, Qwen3)::

    h = x + self_attn(input_layernorm(x))
    o = h~ + mlp(post_attention_layernorm(h~))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from sst_interp.kernels.errors import UsageError


def _gemma3_attention_half(layer: nn.Module, x: torch.Tensor, attn_kwargs: dict[str, Any]) -> torch.Tensor:
    attn_out, _ = layer.self_attn(hidden_states=layer.input_layernorm(x), **attn_kwargs)
    return x + layer.post_attention_layernorm(attn_out)


def _gemma3_ffn_half(layer: nn.Module, h_tilde: torch.Tensor) -> torch.Tensor:
    return h_tilde + layer.post_feedforward_layernorm(layer.mlp(layer.pre_feedforward_layernorm(h_tilde)))


def _llama_attention_half(layer: nn.Module, x: torch.Tensor, attn_kwargs: dict[str, Any]) -> torch.Tensor:
    attn_out, _ = layer.self_attn(hidden_states=layer.input_layernorm(x), **attn_kwargs)
    return x + attn_out


def _llama_ffn_half(layer: nn.Module, h_tilde: torch.Tensor) -> torch.Tensor:
    return h_tilde + layer.mlp(layer.post_attention_layernorm(h_tilde))


@dataclass(frozen=True)
class ArchitectureAdapter:
    """How one model family's decoder layer splits into an attention half and an FFN half.

    Args:
        family: a short name for messages and manifests.
        model_types: the ``config.model_type`` values it serves.
        layer_submodules: submodule names every decoder layer must have (checked at conversion).
        attention_half: ``(layer, x [B,T,d], attention kwargs) -> h [B,T,d]`` (eq:post_attn).
        ffn_half: ``(layer, h~ [B,T,d]) -> o [B,T,d]`` (eq:ffn, residual from h~).
    """

    family: str
    model_types: tuple[str, ...]
    layer_submodules: tuple[str, ...]
    attention_half: Callable[[nn.Module, torch.Tensor, dict[str, Any]], torch.Tensor]
    ffn_half: Callable[[nn.Module, torch.Tensor], torch.Tensor]

    def validate_layer(self, layer: nn.Module, index: int) -> None:
        """Fail loudly when a layer lacks a submodule the adapter relies on."""
        missing = [name for name in self.layer_submodules if not hasattr(layer, name)]
        if missing:
            raise UsageError(
                f"decoder layer {index} ({type(layer).__name__}) has no {missing}; it does not match the "
                f"{self.family} adapter"
            )


GEMMA3 = ArchitectureAdapter(
    family="gemma3",
    model_types=("gemma3_text", "gemma3"),
    layer_submodules=(
        "self_attn",
        "mlp",
        "input_layernorm",
        "post_attention_layernorm",
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
    ),
    attention_half=_gemma3_attention_half,
    ffn_half=_gemma3_ffn_half,
)

LLAMA = ArchitectureAdapter(
    family="llama",
    model_types=("llama", "mistral", "qwen2", "qwen3"),
    layer_submodules=("self_attn", "mlp", "input_layernorm", "post_attention_layernorm"),
    attention_half=_llama_attention_half,
    ffn_half=_llama_ffn_half,
)

ADAPTERS: tuple[ArchitectureAdapter, ...] = (GEMMA3, LLAMA)


def supported_model_types() -> list[str]:
    """All ``config.model_type`` values that have an adapter."""
    return [model_type for adapter in ADAPTERS for model_type in adapter.model_types]


def adapter_for(model: nn.Module) -> ArchitectureAdapter:
    """The adapter for a loaded Hugging Face causal LM; an unsupported family is a :class:`UsageError`."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    for adapter in ADAPTERS:
        if model_type in adapter.model_types:
            return adapter
    raise UsageError(
        f"unsupported architecture {model_type!r}; supported model types: {', '.join(supported_model_types())}"
    )


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers of a causal LM, found through ``model.get_decoder().layers``."""
    decoder = model.get_decoder()
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise UsageError(f"could not find decoder layers at model.get_decoder().layers on {type(model).__name__}")
    return layers
