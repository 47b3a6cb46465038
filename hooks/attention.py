"""Attention recorder: the weights of each recorded query over its keys, per (iteration, layer, head), read by forward
hooks on the model's own attention modules.

A pass of the recorded window's full positions computes one query column (its last); the hook on a layer's
``self_attn`` keeps that column's weights ``[B, heads, keys]`` (eager attention returns them; under ``sdpa`` they are
computed from the same query and key, :mod:`sst_interp.hooks.attention_weights`). A key is named by its index in the
row's own context (prompt tokens from 0, then every token fed after them, across turns), read from the forward
call's 2-D attention mask, whose columns the key columns end (a sliding-window layer's cache holds a suffix of
them): padding and the columns of finished rows have no index and are dropped, and so are the keys the module's own
mask hides from the query (beyond a sliding window), so "every key" is every key the query attends to.

Where the (iteration, layer) of a call is known before it runs (SST: the pass's iteration, the layer's index) the
weights are filed at once; a looped family's call is addressed by its visit, after it ran, so the recorder of the
visits hands the address over (:meth:`AttentionCapture.file`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from sst_interp.hooks.attention_weights import KernelWeights, implementation
from sst_interp.hooks.config import AttentionConfig, PassState
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.owned import OwnedHooks


def attention_module(layer: nn.Module, where: str, user: str = "--attention") -> nn.Module:
    """The attention module of a decoder layer: its ``self_attn`` (every family transformers ships names it so); a
    layer without one is a :class:`UsageError` naming ``where`` and ``user``, what needed it (the flag, a rule)."""
    module = getattr(layer, "self_attn", None)
    if not isinstance(module, nn.Module):
        raise UsageError(f"{user} reads each layer's self_attn module; {where} ({type(layer).__name__}) has "
                         f"none, so its attention cannot be reached (drop {user})")
    return module


def attention_heads(module: nn.Module, user: str = "--attention") -> int:
    """How many query heads an attention module has (its ``num_heads``, else its config's ``num_attention_heads``)."""
    heads = getattr(module, "num_heads", None) or getattr(getattr(module, "config", None), "num_attention_heads", None)
    if heads is None:
        raise UsageError(f"cannot tell how many heads {type(module).__name__} has (no num_heads, no "
                         f"config.num_attention_heads); drop {user}")
    return int(heads)


def context_index(mask: Any) -> torch.Tensor | None:
    """Each column's index in its row's own context, from a forward call's 2-D ``attention_mask`` [B, T] (1: a token
    of the row): [B, T] int64, -1 where the column is no token of the row (padding, a finished row's column); None
    when ``mask`` is not a 2-D tensor."""
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2:
        return None
    index = mask.detach().long().cumsum(-1) - 1
    return torch.where(mask.bool(), index, torch.full_like(index, -1))


def key_index(context: torch.Tensor | None, width: int, visible: Any, what: str) -> torch.Tensor:
    """[B, width] context index of each key column of an attention call that the call's last query attends to (-1:
    padding, a finished row's column, or outside the query's mask: beyond a sliding window).

    Args:
        context: :func:`context_index` of the forward call the attention call is part of (its key columns end
            its columns: a sliding-window layer's cache holds a suffix of them); None is a RuntimeError naming
            ``what`` (the call needs the 2-D mask).
        width: the attention call's key columns.
        visible: the attention call's ``attention_mask`` ([B, 1, T_q, width], boolean or additive), when it has
            one.
    """
    if context is None:
        raise RuntimeError(f"{what} needs the forward call's 2-D attention_mask keyword")
    if width > context.shape[1]:
        raise RuntimeError(f"an attention call has {width} key columns but its attention mask only "
                           f"{context.shape[1]}")
    index = context[:, -width:]
    if isinstance(visible, torch.Tensor) and visible.dim() == 4 and visible.shape[-1] == width:
        row = visible[:, 0, -1, :]
        seen = (row if row.dtype == torch.bool else row == 0).to(index.device)
        index = torch.where(seen, index, torch.full_like(index, -1))
    return index


@dataclass
class _Captured:
    """One query column's weights: where it sits, ``weights`` [B, H', K] float32 and ``keys`` [B, H' or 1, K] int64
    (the key's context index; -1 for a key that is not kept)."""

    index: int
    turn: int
    position: int
    iteration: int
    layer: int
    heads: tuple[int, ...]
    weights: torch.Tensor
    keys: torch.Tensor


class AttentionCapture:
    """Keeps the attention of the full positions' query columns (:class:`~sst_interp.hooks.config.AttentionConfig`).

    Args:
        state: the recorder's :class:`~sst_interp.hooks.config.PassState` (which pass runs, and its rows).
        config: which layers and heads, all keys or the top-k.
    """

    def __init__(self, state: PassState, config: AttentionConfig) -> None:
        self.state, self.config = state, config
        # the running forward call's attention mask [B, T]: each column's context index (-1: not a token of the row)
        self.context: torch.Tensor | None = None
        self.entries: list[_Captured] = []
        self._pending: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._kernel: KernelWeights | None = None

    # ------------------------------------------------------------------------------------------ hooks
    def attach(self, hooks: OwnedHooks, caller: nn.Module, sites: Sequence[tuple[nn.Module, int | None]],
               attn_implementation: str) -> None:
        """Hook ``caller``, the module whose call carries the 2-D ``attention_mask`` keyword (the decoder), and the
        attention module of every ``(layer module, recorded layer)`` of ``sites``: a known layer is filed at once,
        None waits for :meth:`file`. Under ``sdpa`` the weights are computed from the kernel's own query and key
        while the capture is open (:meth:`close` ends that)."""
        hooks.forward_pre_with_kwargs(caller, self._mask_hook)
        modules = []
        for layer_module, layer in sites:
            module = attention_module(layer_module, f"layer {layer}" if layer is not None else
                                      type(layer_module).__name__)
            modules.append(module)
            hooks.forward_with_kwargs(module, self._hook(layer_module, layer))
        self._kernel = KernelWeights(modules, attn_implementation).open()

    def close(self) -> None:
        """Remove the sdpa wrapper, if one was installed (the hooks belong to the caller's OwnedHooks)."""
        if self._kernel is not None:
            self._kernel.close()
            self._kernel = None
        self._pending.clear()

    def _mask_hook(self, module: nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
        self.context = context_index(kwargs.get("attention_mask"))  # None: a recorded call says so (_key_index)

    def _hook(self, layer_module: nn.Module, layer: int | None):
        def hook(module: nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> None:
            if self.state.kind != "full" or self.state.position is None:
                return
            if layer is not None and not self.config.keeps_layer(layer):
                return
            weights = output[1] if isinstance(output, (tuple, list)) and len(output) > 1 else None
            if weights is None:
                raise RuntimeError(f"{type(module).__name__} returned no attention weights (implementation "
                                   f"{implementation(getattr(module, 'config', None))!r})")
            captured = self._select(weights.detach()[:, :, -1, :], kwargs.get("attention_mask"))
            if layer is None:
                self._pending[id(layer_module)] = captured
            else:
                self._add(layer, *captured)

        return hook

    def file(self, layer_module: nn.Module, iteration: int, layer: int) -> None:
        """A looped family's visit ``(iteration, layer)`` of ``layer_module`` ended: file the weights its attention
        kept during the call (nothing when the layer is not recorded or the pass is not)."""
        captured = self._pending.pop(id(layer_module), None)
        if captured is None or not self.config.keeps_layer(layer) or self.state.kind != "full":
            return
        self.state.iteration = iteration
        self._add(layer, *captured)

    # ------------------------------------------------------------------------------------------ selection
    def _key_index(self, width: int, visible: Any) -> torch.Tensor:
        """[B, width] context index of each key column the last query attends to (-1: padding, a finished row's
        column, or outside the query's mask: beyond a sliding window). ``visible``: the attention module's
        ``attention_mask`` keyword ([B, 1, T_q, width], boolean or additive), when it has one."""
        return key_index(self.context, width, visible, "recording attention")

    def _select(self, weights: torch.Tensor, visible: Any) -> tuple[tuple[int, ...], torch.Tensor, torch.Tensor]:
        """Heads and keys of the last query column ``weights`` [B, H, K] (``visible``: the module's attention mask):
        (heads, weights [B, H', K'] float32, keys [B, H' or 1, K'])."""
        heads = tuple(range(weights.shape[1])) if self.config.heads is None else self.config.heads
        if max(heads) >= weights.shape[1]:  # the preflight check refuses such a selection before recording
            raise RuntimeError(f"attention head {max(heads)} asked of a module with {weights.shape[1]} heads")
        if self.config.heads is not None:
            weights = weights[:, list(heads)]
        keys = self._key_index(weights.shape[-1], visible).to(weights.device)[:, None, :]  # [B, 1, K]
        weights = weights.to(torch.float32, copy=True)
        k = self.config.top_k
        if k is None or k >= weights.shape[-1]:
            return heads, weights, keys
        # a key that is not kept may not win a place: -1 is below every weight
        scored = torch.where(keys >= 0, weights, torch.full_like(weights, -1.0))
        top, where = scored.topk(k, dim=-1)
        return heads, top, torch.where(top >= 0, keys.expand_as(weights).gather(-1, where), -1)

    def _add(self, layer: int, heads: tuple[int, ...], weights: torch.Tensor, keys: torch.Tensor) -> None:
        state = self.state
        self.entries.append(_Captured(state.index, state.turn, int(state.position), state.iteration, layer, heads,
                                      weights, keys))

    # ------------------------------------------------------------------------------------------ output
    def columns(self, question_ids: Sequence[str]) -> dict[str, Any] | None:
        """Writer columns of the attention table (rows of finished batch rows dropped): coordinates and ``head``
        [N], ``offsets`` [N + 1], flat ``key_positions`` and ``weights`` [M], ``remaining_mass`` [N]; None when
        nothing was captured."""
        ids = np.asarray(question_ids, dtype=object)
        parts: dict[str, list[np.ndarray]] = {name: [] for name in (
            "question_id", "turn", "position", "iteration", "layer", "head", "lengths", "key_positions", "weights",
            "remaining_mass")}
        for entry in self.entries:
            active = self.state.active[entry.index].cpu().numpy()  # [B]
            weights = entry.weights.cpu().numpy()
            keys = np.broadcast_to(entry.keys.cpu().numpy(), weights.shape)
            kept = (keys >= 0) & active[:, None, None]  # [B, H', K]
            rows, heads = np.nonzero(active[:, None] & np.ones(len(entry.heads), dtype=bool)[None, :])
            lengths = kept.sum(-1)[rows, heads]
            flat_weights = weights[kept]
            sums = np.where(kept, weights.astype(np.float64), 0.0).sum(-1)  # [B, H']
            n = len(rows)
            parts["question_id"].append(ids[rows])
            for name, value in (("turn", entry.turn), ("position", entry.position), ("iteration", entry.iteration),
                                ("layer", entry.layer)):
                parts[name].append(np.full(n, value, dtype=np.int32))
            parts["head"].append(np.asarray(entry.heads, dtype=np.int32)[heads])
            parts["lengths"].append(lengths)
            parts["key_positions"].append(keys[kept].astype(np.int32))
            parts["weights"].append(flat_weights.astype(np.float32))
            parts["remaining_mass"].append((1.0 - sums[rows, heads]).astype(np.float32))
        if not parts["question_id"] or not sum(len(p) for p in parts["question_id"]):
            return None
        out = {name: np.concatenate(values) for name, values in parts.items()}
        lengths = out.pop("lengths")
        out["question_id"] = out["question_id"].astype(str)
        out["offsets"] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return out
