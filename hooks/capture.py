"""Decoder-layer recorders: full hidden states and top-k |value| sketches, captured in forward hooks.

Each hook keeps ``output[:, -1, :]`` of the layer (the position the pass is computing) for the whole batch, on the
device, transformed at capture (detach, slice, copy to the stored dtype). Rows that had finished generating are
dropped when the batch is turned into columns (:func:`rows_to_columns`), one device gather per table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from sst_interp.hooks.config import PassState, RecordConfig
from sst_interp.kernels.owned import OwnedHooks


def layer_output(output: Any) -> torch.Tensor:
    """The hidden states [B, T, d] of a decoder layer's forward output (a tensor, or a tuple led by one)."""
    return output[0] if isinstance(output, (tuple, list)) else output


def top_abs_indices(values: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k largest |values| along the last axis, sorted ascending: [..., d] -> [..., k] int32."""
    top = values.float().abs().topk(k, dim=-1, sorted=False).indices
    return top.sort(dim=-1).values.to(torch.int32)


class _Entries:
    """Captured per-pass tensors [B, ...] with their coordinates (pass index, position, iteration, layer)."""

    def __init__(self) -> None:
        self.keys: list[tuple[int, int, int, int, int]] = []  # (pass index, turn, position, iteration, layer)
        self.tensors: list[torch.Tensor] = []

    def add(self, state: PassState, layer: int, tensor: torch.Tensor) -> None:
        assert state.position is not None
        self.keys.append((state.index, state.turn, state.position, state.iteration, layer))
        self.tensors.append(tensor)

    def __len__(self) -> int:
        return len(self.keys)


def rows_to_columns(entries: _Entries, active: Sequence[torch.Tensor], question_ids: Sequence[str],
                    value_name: str, with_layer: bool = True) -> dict[str, Any] | None:
    """Turn captured entries into writer columns, keeping only rows active during their pass.

    Returns ``{"question_id": [N] str, "turn", "position", "iteration", ("layer"): [N] int32,
    value_name: [N, ...] tensor on the capture device (on the CPU when the captures came from several devices)}``,
    rows ordered by batch row (question) then capture order; None when nothing was captured.
    """
    if not entries.keys:
        return None
    keys = np.asarray(entries.keys, dtype=np.int64)  # [E, 5]
    masks = torch.stack(list(active)).cpu().numpy()  # [passes, B]
    keep = masks[keys[:, 0]]  # [E, B]
    rows, cols = np.nonzero(keep.T)  # batch row, entry: sorted by row then entry
    if rows.size == 0:
        return None
    tensors = entries.tensors
    if len({tensor.device for tensor in tensors}) > 1:
        # Layers on different devices (a device map): gather on the CPU, where the writer takes them anyway.
        tensors = [tensor.cpu() for tensor in tensors]
    stacked = torch.stack(tensors)  # [E, B, ...]
    index_e = torch.from_numpy(cols).to(stacked.device)
    index_b = torch.from_numpy(rows).to(stacked.device)
    columns: dict[str, Any] = {
        "question_id": np.asarray(question_ids, dtype=object)[rows].astype(str),
        "turn": keys[cols, 1].astype(np.int32),
        "position": keys[cols, 2].astype(np.int32),
        "iteration": keys[cols, 3].astype(np.int32),
    }
    if with_layer:
        columns["layer"] = keys[cols, 4].astype(np.int32)
    columns[value_name] = stacked[index_e, index_b]
    return columns


class LayerCapture:
    """Forward hooks on decoder layers: full states in the full window, sketches in the sketch window.

    Args:
        layers: the decoder layers [L] (``sst.layers``).
        state: the shared :class:`PassState`.
        config: the :class:`RecordConfig`.
        hidden_size: d, for the default sketch size.
    """

    def __init__(self, layers: Sequence[nn.Module], state: PassState, config: RecordConfig, hidden_size: int):
        self.layers = list(layers)
        self.state = state
        self.dtype = config.torch_dtype
        self.sketch_k = config.resolved_sketch_k(hidden_size)
        self.hidden = _Entries()
        self.sketch = _Entries()
        # This pass's sketched layers, [B, d] each: their top-k runs once per pass over all layers (one kernel
        # instead of one per layer, which on a GPU costs more than the decoder step's own small kernels).
        self._pending_sketch: list[tuple[int, torch.Tensor]] = []

    def attach(self, hooks: OwnedHooks) -> None:
        """Register one forward hook per layer in ``hooks``."""
        for index, layer in enumerate(self.layers):
            hooks.forward(layer, self._hook(index))

    def _hook(self, index: int):
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            self.keep(index, layer_output(output))

        return hook

    def keep(self, index: int, output: torch.Tensor) -> None:
        """Keep layer ``index``'s output [B, T, d] of the pass in ``state`` (its last column), as the hook does; a
        compiled decode step, which runs no hooks, hands its captured outputs here."""
        kind = self.state.kind
        if kind is None:
            return
        # [B, d], a copy: the pass's activations can be freed, and a CUDA graph's outputs are overwritten by its next
        # replay
        value = output[:, -1, :].detach().to(self.dtype, copy=True)
        if kind == "full":
            self.hidden.add(self.state, index, value)
        else:
            self._pending_sketch.append((index, value))

    def finish_pass(self) -> None:
        """The pass in ``state`` ended: turn its sketched layers into top-k index sets, all layers in one call."""
        if not self._pending_sketch:
            return
        layers = [index for index, _ in self._pending_sketch]
        values = [value for _, value in self._pending_sketch]
        self._pending_sketch = []
        if len({value.device for value in values}) > 1:  # layers spread over devices (a device map)
            indices = [top_abs_indices(value, self.sketch_k) for value in values]
        else:
            indices = list(top_abs_indices(torch.stack(values), self.sketch_k).unbind(0))  # [L', B, k] -> L' x [B, k]
        for index, top in zip(layers, indices):
            self.sketch.add(self.state, index, top)

    def columns(self, question_ids: Sequence[str]) -> dict[str, dict[str, Any] | None]:
        """``{"hidden": columns with values [N, d], "sketch": columns with top_indices [N, k]}``."""
        self.finish_pass()
        return {
            "hidden": rows_to_columns(self.hidden, self.state.active, question_ids, "values"),
            "sketch": rows_to_columns(self.sketch, self.state.active, question_ids, "top_indices"),
        }
