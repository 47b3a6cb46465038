"""Edits of the state stream as tensors, for the compiled decode step (issue 35 item 4).

An intervention changes a layer's streams (paper eq:blend, eq:state_update) at chosen passes. Eager decoding asks a
Python object at every stream (:class:`~sst_interp.model.layer.StateStreamContext` ``intervention``); a compiled
step cannot branch on Python state per pass, so its edits live here, in buffers at fixed addresses that host code
fills before each pass (:mod:`sst_interp.interventions.compiled` fills them from an Intervener's rule matching), and
the layers apply them with the same arithmetic whatever the buffers hold. Per layer l, for a batch of B rows:

- ``state_in``: S' = a * S(C_prev) + b + w * S(C_ref), a [B, 1, 1], b [B, 1, d], w [B, 1, 1] float32 and C_ref
  [B, 1, d] (a reference state read with this pass's h, as the blend reads its own);
- ``alpha``: where ``alpha_set`` [B, 1, 1] holds, alpha_l becomes ``alpha_value`` [B, 1, 1]; a row set to 0 blends
  nothing (h~ = h exactly, as the eager path);
- ``blended`` and ``layer_out``: value' = a * value + b, in float32 or wider (the promoted type of the model's dtype
  and float32), cast back to the value's dtype;
- ``off`` [B, 1, 1]: the layer reads no state this pass (h~ = h, the carried state becomes the output);
- ``frozen`` [B, 1, 1]: the carried state stays the one this pass read.

The identity (a = 1, b = 0, w = 0, nothing set, no mask) changes no value: v * 1 + 0 == v.
"""

from __future__ import annotations

import torch

from sst_interp.model.state_stream import StateStreamParams
from sst_interp.model.static_address import mark_static

#: the streams an affine map edits; ``state_in`` and ``blended`` exist in stateful layers only
AFFINE_STREAMS: tuple[str, ...] = ("state_in", "blended", "layer_out")


class StreamEdits:
    """Every layer's edits for one batch shape, at fixed addresses (see the module docstring).

    Args:
        num_layers: the model's layer count.
        stateful: the layers with a state stream.
        batch: B.
        hidden_size: d.
        dtype: the model's dtype (``blended`` and ``layer_out`` edit in its promotion with float32).
        device: where the step runs.
    """

    def __init__(self, num_layers: int, stateful: tuple[int, ...], batch: int, hidden_size: int,
                 dtype: torch.dtype, device: torch.device) -> None:
        self.num_layers, self.stateful, self.batch, self.hidden_size = int(num_layers), tuple(stateful), int(batch), \
            int(hidden_size)
        self.wide = torch.promote_types(dtype, torch.float32)
        self.device = torch.device(device)
        self.scale: dict[str, dict[int, torch.Tensor]] = {}
        self.shift: dict[str, dict[int, torch.Tensor]] = {}
        for stream in AFFINE_STREAMS:
            layers = range(self.num_layers) if stream == "layer_out" else self.stateful
            kind = torch.float32 if stream == "state_in" else self.wide
            self.scale[stream] = {index: self._buffer((1, 1), kind, 1) for index in layers}
            self.shift[stream] = {index: self._buffer((1, self.hidden_size), kind) for index in layers}
        self.reference_weight = {index: self._buffer((1, 1), torch.float32) for index in self.stateful}
        self.reference = {index: self._buffer((1, self.hidden_size), torch.float32) for index in self.stateful}
        self.alpha_set = {index: self._buffer((1, 1), torch.bool) for index in self.stateful}
        self.alpha_value = {index: self._buffer((1, 1), torch.float32) for index in self.stateful}
        self.off = {index: self._buffer((1, 1), torch.bool) for index in self.stateful}
        self.frozen = {index: self._buffer((1, 1), torch.bool) for index in self.stateful}
        # (what, layer) whose buffers hold something other than the identity: the host rewrites only those
        self._edited: set[tuple[str, int]] = set()

    def _buffer(self, shape: tuple[int, ...], dtype: torch.dtype, value: float = 0) -> torch.Tensor:
        tensor = torch.full((self.batch, *shape), value, dtype=dtype, device=self.device)
        mark_static(tensor)
        return tensor

    # ------------------------------------------------------------------------------------------ host side
    def reset(self) -> None:
        """Every edit back to the identity (before a new batch)."""
        for what, index in list(self._edited):
            if what in AFFINE_STREAMS:
                self.set_affine(what, index, None, None)
            elif what == "reference":
                self.set_reference(index, None, None)
            elif what == "alpha":
                self.set_alpha(index, None, None)
            else:
                self.set_flags(index, off=False, frozen=False)

    def set_affine(self, stream: str, index: int, scale: torch.Tensor | None, shift: torch.Tensor | None) -> None:
        """value' = scale * value + shift at (stream, layer): scale [B, 1, 1], shift [B, 1, d] (any device), or
        both None for the identity."""
        self._put((stream, index), (self.scale[stream][index], self.shift[stream][index]), (scale, shift), (1, 0))

    def set_reference(self, index: int, weight: torch.Tensor | None, state: torch.Tensor | None) -> None:
        """The ``state_in`` term w * S(C_ref): weight [B, 1, 1], C_ref [B, 1, d], or both None (w = 0)."""
        self._put(("reference", index), (self.reference_weight[index], self.reference[index]), (weight, state),
                  (0, 0))

    def set_alpha(self, index: int, mask: torch.Tensor | None, value: torch.Tensor | None) -> None:
        """alpha_l becomes ``value`` [B, 1, 1] where ``mask`` [B, 1, 1] holds; both None: alpha_l unchanged."""
        self._put(("alpha", index), (self.alpha_set[index], self.alpha_value[index]), (mask, value), (0, 0))

    def set_flags(self, index: int, *, off: bool, frozen: bool) -> None:
        """Whether layer ``index`` reads no state this pass (``off``) and keeps its carried state (``frozen``); a
        freeze and the stream off hold for the whole batch, as in the eager path."""
        key = ("flags", index)
        if not off and not frozen and key not in self._edited:
            return
        self.off[index].fill_(bool(off))
        self.frozen[index].fill_(bool(frozen))
        (self._edited.add if off or frozen else self._edited.discard)(key)

    def _put(self, key: tuple[str, int], buffers: tuple[torch.Tensor, ...], values: tuple[torch.Tensor | None, ...],
             identity: tuple[float, ...]) -> None:
        if values[0] is None:
            if key in self._edited:
                for buffer, fill in zip(buffers, identity):
                    buffer.fill_(fill)
                self._edited.discard(key)
            return
        for buffer, value in zip(buffers, values):
            buffer.copy_(value)
        self._edited.add(key)

    # ------------------------------------------------------------------------------------------ inside the step
    def _affine(self, stream: str, index: int, value: torch.Tensor) -> torch.Tensor:
        return (value * self.scale[stream][index] + self.shift[stream][index]).to(value.dtype)

    def blend(self, index: int, params: StateStreamParams, h: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        """h~ [B, 1, d] of eq:blend under layer ``index``'s edits; h [B, 1, d], previous C_prev [B, 1, d]."""
        state = self._affine("state_in", index, params.read_state(previous, h))
        state = state + self.reference_weight[index] * params.read_state(self.reference[index], h)
        alpha = torch.where(self.alpha_set[index], self.alpha_value[index], params.blend_alpha())  # [B, 1, d]
        mixed = torch.lerp(h.float(), state, alpha).to(h.dtype)
        # alpha 0 is the stream off, h~ = h exactly (the float32 lerp would round h in a float64 model)
        mixed = torch.where(self.alpha_set[index] & (self.alpha_value[index] == 0), h, mixed)
        return torch.where(self.off[index], h, self._affine("blended", index, mixed))

    def layer_out(self, index: int, output: torch.Tensor) -> torch.Tensor:
        """The layer's output o [B, 1, d] under its edits."""
        return self._affine("layer_out", index, output)

    def carry(self, index: int, params: StateStreamParams, previous: torch.Tensor, output: torch.Tensor
              ) -> torch.Tensor:
        """The carried state [B, d] after this pass: C_prev where frozen, o where the stream was off, else
        eq:state_update."""
        updated = torch.where(self.off[index], output, params.update(previous, output))
        return torch.where(self.frozen[index], previous.to(updated.dtype), updated).squeeze(1)
