"""SST configuration (paper Sec. 2.1, eq:alpha)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.paper import A_MAX, A_MIN, THETA_INIT, alpha_init

UpdateRule = Literal["direct", "ema_linked"]
StateScale = Literal["unit", "hidden"]
PromptMode = Literal["two_pass", "sequential", "none"]
#: The prompt modes by name (the values of :data:`PromptMode`).
PROMPT_MODES: tuple[str, ...] = ("two_pass", "sequential", "none")


@dataclass
class SSTConfig:
    """How a backbone becomes a State Stream Transformer.

    Args:
        a_min: lower bound of every blend coefficient (paper: 0.015). The blend is never bypassed.
        a_max: upper bound of every blend coefficient (paper: 0.10).
        theta_init: initial blend logit (paper: -1.8, so alpha_init = a_min + (a_max - a_min) * sigmoid(-1.8)).
        update: ``"direct"`` stores the post-FFN output as the new state (eq:state_update, the paper's model);
            ``"ema_linked"`` stores ``alpha * C_prev + (1 - alpha) * o`` with the same alpha used for reading
            (tab:ema_variant_ablation).
        state_scale: ``"unit"`` reads the state as RMSNorm(C) (the paper's S); ``"hidden"`` multiplies it by the
            per-position RMS of the post-attention hidden state so state and hidden state have the same scale
            (an untrained unit-scale SST on Gemma 3 is nearly inert; see the README's Concepts, ``state_scale``).
        layers: decoder layers that carry a state stream; ``None`` means all (the paper).
        state_norm_eps: epsilon of the state RMSNorm.
    """

    a_min: float = A_MIN
    a_max: float = A_MAX
    theta_init: float = THETA_INIT
    update: UpdateRule = "direct"
    state_scale: StateScale = "unit"
    layers: list[int] | None = field(default=None)
    state_norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        if not 0.0 <= self.a_min < self.a_max <= 1.0:
            raise UsageError(f"need 0 <= a_min < a_max <= 1, got a_min={self.a_min}, a_max={self.a_max}")
        if self.update not in ("direct", "ema_linked"):
            raise UsageError(f"unknown state update {self.update!r}; use 'direct' or 'ema_linked'")
        if self.state_scale not in ("unit", "hidden"):
            raise UsageError(f"unknown state_scale {self.state_scale!r}; use 'unit' or 'hidden'")
        if self.layers is not None:
            self.layers = sorted({int(layer) for layer in self.layers})

    @property
    def alpha_init(self) -> float:
        """The blend coefficient every dimension starts from: a_min + (a_max - a_min) * sigmoid(theta_init)."""
        return alpha_init(self.theta_init, self.a_min, self.a_max)

    def layer_indices(self, num_layers: int) -> list[int]:
        """The decoder layers that carry a state stream, validated against the model's depth."""
        if self.layers is None:
            return list(range(num_layers))
        bad = [layer for layer in self.layers if not 0 <= layer < num_layers]
        if bad:
            raise UsageError(f"SST layers {bad} do not exist in a model with {num_layers} layers")
        return list(self.layers)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the ``sst`` block of ``sst_config.json`` and of run manifests)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SSTConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error so typos do not pass silently."""
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise UsageError(f"unknown SST config keys {sorted(unknown)}; known keys are {sorted(known)}")
        return cls(**data)
