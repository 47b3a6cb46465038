"""FFN gate activity: a forward hook on each layer's MLP gate projection (``mlp.gate_proj``).

Per recorded pass and layer: the fraction of gate units with a positive pre-activation, and optionally the signs
packed 8 to a byte in numpy.packbits order (first unit in the most significant bit), for flip rates between
iterations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from sst_interp.kernels.errors import UsageError
from sst_interp.hooks.capture import _Entries, layer_output, rows_to_columns
from sst_interp.hooks.config import PassState
from sst_interp.kernels.owned import OwnedHooks

_BIT_WEIGHTS = (128, 64, 32, 16, 8, 4, 2, 1)


def gate_projection(layer: nn.Module, index: int) -> nn.Module:
    """The gate projection of a decoder layer's gated MLP (Gemma 3 and the Llama family: ``mlp.gate_proj``)."""
    module = getattr(getattr(layer, "mlp", None), "gate_proj", None)
    if module is None:
        raise UsageError(f"decoder layer {index} ({type(layer).__name__}) has no mlp.gate_proj; "
                         "--gates needs a gated MLP, rerun without --gates")
    return module


def pack_signs(positive: torch.Tensor) -> torch.Tensor:
    """Pack a bool tensor [B, F] into bytes [B, ceil(F / 8)] uint8, as numpy.packbits(axis=-1) does."""
    batch, units = positive.shape
    pad = (-units) % 8
    if pad:
        positive = torch.cat([positive, positive.new_zeros(batch, pad)], dim=1)
    weights = torch.tensor(_BIT_WEIGHTS, dtype=torch.int32, device=positive.device)
    return (positive.view(batch, -1, 8).to(torch.int32) * weights).sum(-1).to(torch.uint8)


class GateCapture:
    """Hooks ``mlp.gate_proj`` of every layer; records during full-window passes only."""

    def __init__(self, layers: Sequence[nn.Module], state: PassState, sign_bits: bool) -> None:
        self.modules = [gate_projection(layer, i) for i, layer in enumerate(layers)]
        self.state = state
        self.sign_bits = sign_bits
        self.fraction = _Entries()
        self.bits = _Entries()

    def attach(self, hooks: OwnedHooks) -> None:
        """Register one forward hook per gate projection in ``hooks``."""
        for index, module in enumerate(self.modules):
            hooks.forward(module, self._hook(index))

    def _hook(self, index: int):
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if self.state.kind != "full":
                return
            positive = layer_output(output)[:, -1, :].detach() > 0  # [B, F]
            self.fraction.add(self.state, index, positive.float().mean(-1))
            if self.sign_bits:
                self.bits.add(self.state, index, pack_signs(positive))

        return hook

    def columns(self, question_ids: Sequence[str]) -> dict[str, Any] | None:
        """Writer columns of the gates table: active_fraction [N] and (optionally) sign_bits [N, F/8] uint8."""
        base = rows_to_columns(self.fraction, self.state.active, question_ids, "active_fraction")
        if base is not None and self.sign_bits:
            base["sign_bits"] = rows_to_columns(self.bits, self.state.active, question_ids, "sign_bits")["sign_bits"]
        return base
