"""What a read of a run yields: one block per (question, turn) at one depth, its arrays on the grid of the
positions, iterations and layers that question recorded (:class:`~sst_interp.store.reader.Run` builds them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from sst_interp.store import schema as sch


@dataclass(frozen=True)
class HiddenBlock:
    """Full hidden states of one (question, turn) at one depth.

    Args:
        question_id: the question.
        turn: 0-based turn.
        positions: [P] int64, generated positions, ascending.
        iterations: [I] int64, 1-based.
        layers: [L] int64, 0-based.
        values: [P, I, L, d] float32 (bfloat16 widened exactly); NaN where a (position, iteration, layer)
            was not recorded (only when the grid is ragged, e.g. under a probe depth policy).
    """

    question_id: str
    turn: int
    positions: np.ndarray
    iterations: np.ndarray
    layers: np.ndarray
    values: np.ndarray


BF16_NAN = 0x7FC0  # the bfloat16 bits that widen to float32 NaN (0x7FC00000), as np.float32(np.nan)


@dataclass(frozen=True)
class RawHiddenBlock:
    """Hidden states of one (question, turn) at one depth as stored, not yet widened (:meth:`Run.hidden_raw`).

    Analyses that need one iteration, one layer or only magnitudes widen just that part; every method returns
    exactly the numbers of the matching slice of :attr:`HiddenBlock.values`.

    Args:
        question_id, turn, positions, iterations, layers: as in :class:`HiddenBlock`.
        raw: [P, I, L, d]: uint16 bfloat16 bit patterns (``dtype`` "bfloat16") or float32 values ("float32");
            cells with no row hold NaN (bits ``BF16_NAN`` for bfloat16). Often a read-only view of the decoded
            column (no copy is made when the rows already fill the grid in order).
        dtype: the run's hidden dtype.
        complete: every (position, iteration, layer) cell has a row (no NaN fill): then any positions / layers
            subset of this block is exactly the block a filtered :meth:`Run.hidden` read returns.
    """

    question_id: str
    turn: int
    positions: np.ndarray
    iterations: np.ndarray
    layers: np.ndarray
    raw: np.ndarray
    dtype: str
    complete: bool

    def values(self, key: Any = ...) -> np.ndarray:
        """float32 ``HiddenBlock.values[key]`` (bfloat16 widened exactly), widening only ``raw[key]``."""
        part = self.raw[key]
        if self.dtype == "float32":
            return np.array(part, dtype=np.float32)
        return sch.bf16_bits_to_float32(part)

    def magnitudes(self, key: Any = ...) -> np.ndarray:
        """float32 ``np.abs(HiddenBlock.values[key])``, bit for bit (for bfloat16 the sign bit is cleared before
        widening, which is what ``np.abs`` does to the widened value, NaN included)."""
        part = self.raw[key]
        if self.dtype == "float32":
            return np.abs(part)
        wide = np.left_shift(part, 16, dtype=np.uint32)  # the widened bits ...
        wide &= np.uint32(0x7FFF0000)  # ... with the sign cleared
        return wide.view(np.float32)


@dataclass(frozen=True)
class LogitBlock:
    """Per-iteration output distributions of one (question, turn) at one depth.

    Args:
        positions: [P] int64; iterations: [I] int64 (1-based).
        argmax: [P, I] int32 (-1 where not recorded).
        top_ids: [P, I, K] int32, ids of the top-K log-probs, descending by log-prob.
        top_logprobs: [P, I, K] float32.
        entropy: [P, I] float32 (nats).
        tracked_logprobs: [P, I, K] float32: log-probs at each iteration of that position's iteration-1 top_ids.
    """

    question_id: str
    turn: int
    positions: np.ndarray
    iterations: np.ndarray
    argmax: np.ndarray
    top_ids: np.ndarray
    top_logprobs: np.ndarray
    entropy: np.ndarray
    tracked_logprobs: np.ndarray


@dataclass(frozen=True)
class SketchBlock:
    """Top-k |value| index sketches of one (question, turn) at one depth.

    Args:
        positions: [P] int64; iterations: [I] int64; layers: [L] int64.
        top_indices: [P, I, L, k] int32, indices of the top-k |values| sorted ascending (-1 where not recorded);
            int32 whether the shard stores uint16 (d < 65,536) or int32 indices, widened exactly.
    """

    question_id: str
    turn: int
    positions: np.ndarray
    iterations: np.ndarray
    layers: np.ndarray
    top_indices: np.ndarray


@dataclass(frozen=True)
class GateBlock:
    """FFN gate activity of one (question, turn) at one depth.

    Args:
        positions: [P] int64; iterations: [I] int64; layers: [L] int64.
        active_fraction: [P, I, L] float32, fraction of gate units with positive pre-activation (NaN if absent).
        sign_bits: [P, I, L, n_bytes] uint8 (numpy.packbits of gate > 0), or None when not recorded.
    """

    question_id: str
    turn: int
    positions: np.ndarray
    iterations: np.ndarray
    layers: np.ndarray
    active_fraction: np.ndarray
    sign_bits: np.ndarray | None = None
