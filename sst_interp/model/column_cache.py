"""A static KV cache written at an explicit column, and the attention masks that go with it (issue 35).

The SST's iterative refinement (paper sec:inference_iteration) reruns the pass that emits a token k times and
overwrites that position's KV entries each time. With transformers' ``DynamicCache`` that is a ``crop(-1)`` before
every rerun, which changes tensor shapes, so a compiled step would recompile (or fall back to eager) at every
iteration. :class:`ColumnCache` preallocates one ``[B, H, max_columns, D]`` buffer per layer at fixed addresses and
writes each pass at the column the caller names: a rerun writes the same column again, which is the overwrite, with
no crop and no shape change.

Sliding-window layers keep every column too, and the window is applied by the mask (:func:`column_masks`), not by
a ring buffer. A ring would roll on every rerun of the same position (transformers' static sliding layer advances
its write index on each update), so it cannot express an overwrite; a full-length buffer costs
``max_columns / window`` times the window's memory, which at paper shape and batch 1 is a few hundred MB.

Columns are cache columns, as in :class:`~sst_interp.model.generation.GenerationSession`: a left-padded row's padding
occupies columns, and a sliding window counts columns (the semantics of transformers' own masks).
"""

from __future__ import annotations

import torch

from sst_interp.model.static_address import mark_static

# The attention implementations whose mask format :func:`column_masks` produces: a boolean "may attend" mask for
# SDPA and an additive float mask (0 or the dtype's minimum) for eager attention, as transformers builds them.
MASK_FORMATS: tuple[str, ...] = ("eager", "sdpa")


class ColumnCache:
    """Per-layer static key/value buffers, written at ``column`` (a 0-dim int64 tensor at a fixed address).

    Duck-types the part of transformers' ``Cache`` that attention layers call (``update``). The buffers are allocated
    by the first (eager) pass and marked as static addresses, so a compiled step mutates them in place (CUDA graphs
    need that).

    Args:
        num_layers: number of decoder layers L.
        max_columns: columns to preallocate (prompt width plus new tokens).
        device: where the column index lives (the input embedding's device).
    """

    is_compileable = True

    def __init__(self, num_layers: int, max_columns: int, device: torch.device | str) -> None:
        self.num_layers = int(num_layers)
        self.max_columns = int(max_columns)
        self.column = torch.zeros((), dtype=torch.long, device=device)
        self.offsets = torch.arange(self.max_columns, device=device)
        self.keys: list[torch.Tensor | None] = [None] * self.num_layers
        self.values: list[torch.Tensor | None] = [None] * self.num_layers
        mark_static(self.column)
        mark_static(self.offsets)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args,
               **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``key_states``/``value_states`` [B, H, T, D] at columns ``column .. column + T - 1`` of layer
        ``layer_idx``; returns the layer's whole buffers [B, H, max_columns, D] (the mask hides unwritten columns)."""
        if self.keys[layer_idx] is None:
            self._allocate(layer_idx, key_states, value_states)
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        index = self.column + self.offsets[: key_states.shape[-2]]
        keys.index_copy_(2, index, key_states.to(keys.dtype))
        values.index_copy_(2, index, value_states.to(values.dtype))
        return keys, values

    def _allocate(self, layer_idx: int, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        if torch.compiler.is_compiling():
            raise RuntimeError("the column cache is allocated by an eager pass (the prefill) before any compiled step")
        batch, heads, _, key_dim = key_states.shape
        shape = (batch, heads, self.max_columns)
        self.keys[layer_idx] = torch.zeros(*shape, key_dim, dtype=key_states.dtype, device=key_states.device)
        self.values[layer_idx] = torch.zeros(*shape, value_states.shape[-1], dtype=value_states.dtype,
                                             device=value_states.device)
        mark_static(self.keys[layer_idx])
        mark_static(self.values[layer_idx])

    def set_column(self, column: int) -> None:
        """The next pass writes from ``column`` (an in-place fill: the address stays fixed)."""
        if not 0 <= column < self.max_columns:
            raise ValueError(f"column {column} is outside the cache's {self.max_columns} columns")
        self.column.fill_(int(column))

    # transformers' generation helpers and the per-position policy's HaltedRows read these
    def crop(self, tokens: int) -> None:
        """Nothing to crop: a rerun writes its column again (kept so code written for ``DynamicCache`` runs)."""

    @property
    def layers(self) -> list[_ColumnLayerView]:
        """Per layer, views ``keys``/``values`` [B, H, column + 1, D] ending at the current column (writes go through to
        the buffers): the ``cache.layers[i].keys[:, :, -1]`` that :class:`~sst_interp.model.per_position.HaltedRows`
        saves and restores is the current position's entry."""
        end = int(self.column) + 1
        return [_ColumnLayerView(keys[:, :, :end], values[:, :, :end])
                for keys, values in zip(self.keys, self.values) if keys is not None and values is not None]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Columns written so far, up to and including the current one (eager use only)."""
        return int(self.column) + 1


class _ColumnLayerView:
    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        self.keys, self.values = keys, values


def column_masks(real: torch.Tensor, first_column: torch.Tensor | int, width: int, kv_columns: int,
                 sliding_window: int | None, implementation: str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The attention masks of one pass whose queries are columns ``first_column .. first_column + width - 1``.

    Key column j is visible to query column q when j <= q, ``real[:, j]`` is set, and, for sliding-window layers,
    q - j < ``sliding_window`` (columns, as transformers counts them). A query that would see no key at all (a
    padding column) sees every column up to itself instead, as transformers does, so no row of the softmax is empty
    (its output is never read, but a NaN there would reach later layers' values).

    Args:
        real: [B, kv_columns] bool, True where a column holds a token of that row.
        first_column: the first query column (an int, or a 0-dim tensor inside a compiled step).
        width: number of query columns T.
        kv_columns: number of key columns (the cache's ``max_columns``, or T without a cache).
        sliding_window: the window of sliding layers (None: the model has none).
        implementation: the attention implementation, one of :data:`MASK_FORMATS`.
        dtype: the model's compute dtype (for the eager format's additive mask).

    Returns:
        ``{"full_attention": mask, "sliding_attention": mask}``, each [B, 1, T, kv_columns]: bool for ``sdpa``, an
        additive float mask for ``eager``.
    """
    if implementation not in MASK_FORMATS:
        raise ValueError(f"no mask format for attention implementation {implementation!r}; use one of {MASK_FORMATS}")
    device = real.device
    query = (first_column + torch.arange(width, device=device))[:, None]  # [T, 1]
    key = torch.arange(kv_columns, device=device)[None, :]  # [1, K]
    causal = key <= query  # [T, K]
    masks = {"full_attention": causal}
    if sliding_window is not None:
        masks["sliding_attention"] = causal & (query - key < sliding_window)
    out = {}
    for name, allowed in masks.items():
        mask = allowed[None, None] & real[:, None, None, :]  # [B, 1, T, K]
        mask = mask | (~mask.any(-1, keepdim=True) & allowed[None, None])
        out[name] = mask if implementation == "sdpa" else torch.where(
            mask, torch.zeros((), dtype=dtype, device=device), torch.finfo(dtype).min)
    out.setdefault("sliding_attention", out["full_attention"])
    return out
