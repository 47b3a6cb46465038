"""Small per-question summaries noted from hidden blocks an analysis has already read, so that the next analysis of
the same :class:`~sst_interp.store.Run` object does not read those shards again.

The hidden shards of the deepest depth are the largest part of a run. Top-k overlap (basin shifts) decodes every
question's full block there; convergence monitoring needs, from the same blocks, only the L2 deltas between
successive iterations at the last layer ([P, I-1] numbers per question). A pass that holds a question's full, complete
block calls :func:`note_block`; :func:`noted_l2_deltas` hands the deltas to
:func:`~sst_interp.analyses.convergence.convergence_monitoring`, which reads only the questions not noted.

The notes are the numbers a read would give, bit for bit: they are taken only from complete blocks (every
(position, iteration, layer) cell recorded, so the layer's slice is exactly what a ``layers=[layer]`` read returns)
and computed by the same :func:`l2_deltas` on the same float32 values. They live as long as the Run object (a weak
reference): a run reopened from disk starts with none.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from sst_interp.analyses.loop_manifest import declared_state_layer

if TYPE_CHECKING:
    from sst_interp.store import Run
    from sst_interp.store.blocks import RawHiddenBlock

_NOTES: weakref.WeakKeyDictionary[Any, dict[tuple, dict[str, tuple[np.ndarray, np.ndarray]]]] = \
    weakref.WeakKeyDictionary()


def l2_deltas(values: np.ndarray) -> np.ndarray:
    """``||h_{i+1} - h_i||_2`` for ``values: [..., I, d]`` -> ``[..., I-1]`` float64 (accumulated in float64)."""
    values = np.asarray(values)
    diff = np.diff(values.astype(np.float64, copy=False), axis=-2)
    return np.sqrt(np.einsum("...d,...d->...", diff, diff))


def _notes(run: Run) -> dict[tuple, dict[str, tuple[np.ndarray, np.ndarray]]] | None:
    try:
        return _NOTES.setdefault(run, {})
    except TypeError:  # an object that cannot be weakly referenced (a stand-in for a Run): nothing is shared
        return None


def note_block(run: Run, depth: int, block: RawHiddenBlock) -> None:
    """Note the summaries of ``block``: a question's block at ``depth`` read with no positions or layers filter."""
    if not block.complete:
        return

    declared = declared_state_layer(run.manifest)  # a family's carried state; the last layer may not loop
    layer = run.num_layers - 1 if declared is None else declared
    at = np.flatnonzero(block.layers == layer)
    notes = _notes(run)
    if at.size == 0 or notes is None:
        return
    deltas = l2_deltas(block.values((slice(None), slice(None), int(at[0]))))  # [P, I-1]
    notes.setdefault(("l2", int(depth), int(block.turn), layer), {})[block.question_id] = (block.positions, deltas)


def noted_l2_deltas(run: Run, depth: int, turn: int, layer: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{question id: (positions [P], L2 deltas [P, I-1] at ``layer``)} noted so far for (``depth``, ``turn``)."""
    notes = _notes(run)
    return dict(notes.get(("l2", int(depth), int(turn), int(layer)), {})) if notes is not None else {}
