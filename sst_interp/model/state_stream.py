"""Per-layer state-stream parameters and the blend/update maths (paper eq:blend, eq:state_update, eq:alpha).

For layer l (all element-wise over the hidden dimension d)::

    alpha_l = a_min + (a_max - a_min) * sigmoid(theta_l)                     # eq:alpha
    S(C)    = RMSNorm_l(C)                  (state_scale="unit", the paper)
            = RMSNorm_l(C) * rms(h)         (state_scale="hidden")
    h~      = (1 - alpha_l) * h + alpha_l * S(C_prev)                        # eq:blend
    C       = o                             (update="direct", eq:state_update)
            = alpha_l * C_prev + (1 - alpha_l) * o   (update="ema_linked")

The parameters are kept in float32 whatever the backbone dtype, and the blend itself is computed in float32
then cast back to the hidden state's dtype (so a bfloat16 backbone sees one rounding, after the blend).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sst_interp.model.config import SSTConfig
from sst_interp.kernels.paper import alpha_from_theta


class StateStreamParams(nn.Module):
    """The learned state-stream parameters of one decoder layer: ``theta`` [d] and ``state_norm_weight`` [d].

    Both stay float32 even when the model is cast (``.to(torch.bfloat16)``, ``.half()``): the paper keeps them
    at full precision, and the blend perturbation is below bfloat16 resolution otherwise (app:precision_proof).
    """

    def __init__(self, hidden_size: int, config: SSTConfig) -> None:
        super().__init__()
        self.a_min = config.a_min
        self.a_max = config.a_max
        self.update_rule = config.update
        self.state_scale = config.state_scale
        self.eps = config.state_norm_eps
        self.theta = nn.Parameter(torch.full((hidden_size,), float(config.theta_init), dtype=torch.float32))
        self.state_norm_weight = nn.Parameter(torch.ones(hidden_size, dtype=torch.float32))
        self._alpha_cache: tuple[int, torch.device, torch.Tensor] | None = None
        self.compiled_blend = False  # see SSTModel.compile_blend

    def _apply(self, fn, recurse: bool = True):  # noqa: ANN001 - torch's signature
        # Device moves apply; dtype casts do not: the state parameters are float32 by contract.
        super()._apply(fn, recurse)
        for param in (self.theta, self.state_norm_weight):
            if param.dtype != torch.float32:
                param.data = param.data.float()
        return self

    def alpha(self) -> torch.Tensor:
        """Blend coefficients alpha_l: [d] float32, each in [a_min, a_max]."""
        return alpha_from_theta(self.theta, self.a_min, self.a_max)

    def blend_alpha(self) -> torch.Tensor:
        """The alpha the blend uses now: [d] float32 (cached between optimiser steps when no gradient is needed)."""
        return self._inference_alpha()

    def _inference_alpha(self) -> torch.Tensor:
        # Generation calls the blend once per layer and pass; without autograd, alpha only changes when theta does
        # (its version counter moves on every in-place update, e.g. an optimizer step or a checkpoint load).
        if (torch.is_grad_enabled() and self.theta.requires_grad) or torch.compiler.is_compiling():
            # A compiled step computes alpha inside its graph (a fused [d] sigmoid): the cache's version check is
            # Python state that a graph cannot guard on.
            return self.alpha()
        key = (self.theta._version, self.theta.device)
        if self._alpha_cache is None or self._alpha_cache[:2] != key:
            with torch.no_grad():
                self._alpha_cache = (*key, self.alpha())
        return self._alpha_cache[2]

    def read_state(self, state: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """S(C): the state as the blend reads it.

        Args:
            state: C_prev, [..., d] (any float dtype). A zero state reads as zero.
            hidden: h, [..., d], only used when ``state_scale == "hidden"``.

        Returns:
            [..., d] float32.
        """
        return read_state(state, hidden, self.state_norm_weight, self.eps, self.state_scale == "hidden")

    def blend(self, hidden: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """h~ = (1 - alpha) * h + alpha * S(C_prev), computed in float32 and cast back to ``hidden.dtype``.

        Args:
            hidden: post-attention hidden state h, [B, T, d].
            state: C_prev broadcastable to [B, T, d].
        """
        kernel = _COMPILED_BLEND if self.compiled_blend and not torch.is_grad_enabled() else blend
        return kernel(hidden, state, self.state_norm_weight, self._inference_alpha(), self.eps,
                      self.state_scale == "hidden")

    def update(self, previous: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        """The new state C from C_prev [.., d] and the layer output o [.., d]; returned in ``output.dtype``."""
        if self.update_rule == "direct":
            return output
        alpha = self.alpha()
        return (alpha * previous.float() + (1.0 - alpha) * output.float()).to(output.dtype)


def read_state(state: torch.Tensor, hidden: torch.Tensor, norm_weight: torch.Tensor, eps: float,
               scale_by_hidden: bool) -> torch.Tensor:
    """S(C) of :meth:`StateStreamParams.read_state`: [..., d] float32."""
    normed = F.rms_norm(state.float(), norm_weight.shape, norm_weight, eps)
    if scale_by_hidden:
        hidden32 = hidden.float()
        normed = normed * (torch.linalg.vector_norm(hidden32, dim=-1, keepdim=True) * hidden32.shape[-1] ** -0.5)
    return normed


def blend(hidden: torch.Tensor, state: torch.Tensor, norm_weight: torch.Tensor, alpha: torch.Tensor, eps: float,
          scale_by_hidden: bool) -> torch.Tensor:
    """eq:blend as a pure function: lerp(h, S(C), alpha) = (1 - alpha) * h + alpha * S(C), in float32, cast back
    to ``hidden.dtype``. [B, T, d] -> [B, T, d]."""
    return torch.lerp(hidden.float(), read_state(state, hidden, norm_weight, eps, scale_by_hidden),
                      alpha).to(hidden.dtype)


def _compile_blend():
    # Compiled lazily: torch.compile wraps at once but builds its kernel (one fused kernel instead of about five
    # per layer and pass) at the first call. dynamic=True: one kernel for every batch size and sequence length.
    return torch.compile(blend, dynamic=True, fullgraph=True)


class _LazyCompiledBlend:
    def __init__(self) -> None:
        self.compiled = None

    def __call__(self, *args):
        if self.compiled is None:
            self.compiled = _compile_blend()
        return self.compiled(*args)


_COMPILED_BLEND = _LazyCompiledBlend()
