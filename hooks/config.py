"""What the recorders capture, and the pass currently running (shared by all recorders of one Recorder)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

HIDDEN_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
PAPER_D = 5376
PAPER_SKETCH_K = 1024


def default_sketch_k(hidden_size: int) -> int:
    """The paper's top-1024 of d=5376 scaled to this model: round(d * 1024 / 5376), at least 1."""
    return max(1, round(hidden_size * PAPER_SKETCH_K / PAPER_D))


@dataclass(frozen=True)
class AttentionConfig:
    """Which attention weights to record (``record --attention``), at the full positions' queries.

    Args:
        layers: the recorded layers (indices of the run's layer axis) whose attention is kept; None: every layer.
        heads: the heads kept in each of those layers; None: every head.
        top_k: keep each (query, head)'s ``top_k`` keys by weight (and the mass the others hold); None: every key.
    """

    layers: tuple[int, ...] | None = None
    heads: tuple[int, ...] | None = None
    top_k: int | None = None

    def __post_init__(self) -> None:
        for name in ("layers", "heads"):
            values = getattr(self, name)
            if values is not None and (not values or min(values) < 0 or len(set(values)) != len(values)):
                raise ValueError(f"attention {name} must be distinct indices >= 0, got {values}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"attention top_k must be >= 1, got {self.top_k}")

    def keeps_layer(self, layer: int) -> bool:
        """Whether ``layer``'s attention is recorded."""
        return self.layers is None or layer in self.layers


@dataclass(frozen=True)
class RecordConfig:
    """What to record during generation (docs/format.md).

    Args:
        full_positions: generated positions 0..full_positions-1 of each turn are recorded in full at every layer
            and iteration (position 0 always, even when this is 0).
        sketch_positions: the next sketch_positions positions get top-k |value| index sketches.
        sketch_k: size of a sketch; None means round(d * 1024 / 5376).
        top_k: K of the per-iteration top-K ids/log-probs, recorded for every full or sketched position.
        dtype: ``float32`` or ``bfloat16``, the stored dtype of hidden states (bfloat16 keeps its bits).
        gates: also record FFN gate activity (fraction of gate units with positive pre-activation) at the full
            positions, through a hook on each layer's ``mlp.gate_proj``.
        gate_sign_bits: with ``gates``, also keep the packed sign bits (numpy.packbits order) for flip rates.
        logits: record the per-iteration logit summaries.
        attention: which attention weights to record at the full positions (:class:`AttentionConfig`); None:
            none.
    """

    full_positions: int = 10
    sketch_positions: int = 512
    sketch_k: int | None = None
    top_k: int = 128
    dtype: str = "float32"
    gates: bool = False
    gate_sign_bits: bool = True
    logits: bool = True
    attention: AttentionConfig | None = None

    def __post_init__(self) -> None:
        if self.dtype not in HIDDEN_DTYPES:
            raise ValueError(f"dtype must be one of {sorted(HIDDEN_DTYPES)}, got {self.dtype!r}")
        if self.full_positions < 0 or self.sketch_positions < 0 or self.top_k < 1:
            raise ValueError("full_positions and sketch_positions must be >= 0 and top_k >= 1")
        if self.sketch_k is not None and self.sketch_k < 1:
            raise ValueError("sketch_k must be >= 1")

    @property
    def full_window(self) -> int:
        """Positions < full_window are recorded in full (at least position 0)."""
        return max(1, self.full_positions)

    @property
    def window(self) -> int:
        """Positions < window are recorded at all (full, sketch and logits)."""
        return self.full_window + self.sketch_positions

    @property
    def torch_dtype(self) -> torch.dtype:
        """The torch dtype of stored hidden states."""
        return HIDDEN_DTYPES[self.dtype]

    def resolved_sketch_k(self, hidden_size: int) -> int:
        """sketch_k, or the default for ``hidden_size``, capped at ``hidden_size``."""
        return min(hidden_size, self.sketch_k if self.sketch_k is not None else default_sketch_k(hidden_size))


@dataclass
class PassState:
    """The decoder pass in progress, as the observer last announced it.

    Args:
        kind: ``None`` (nothing to record), ``"full"`` or ``"sketch"``.
        position, iteration, turn: coordinates of the pass (position None for passes that emit nothing).
        index: index into ``active`` of this pass's mask.
        active: one [B] bool mask per recorded pass (a clone: generation updates its own mask in place).
    """

    kind: str | None = None
    position: int | None = None
    iteration: int = 0
    turn: int = 0
    index: int = -1
    active: list[torch.Tensor] = field(default_factory=list)
