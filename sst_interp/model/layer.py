"""The SST decoder layer: the backbone's own layer class with the blend inserted between its two halves.

Conversion swaps each decoder layer's ``__class__`` to a subclass made here, so weights, quantised modules,
device placement and gradient checkpointing of the original layer are kept. The subclass reads how to treat the
state from a :class:`StateStreamContext` shared by all layers of one model:

- ``off``: no blend (a standard transformer layer; two-pass training pass 1; the baseline);
- ``given``: blend with a supplied state for every position (pass 2; two-pass prefill): ``given[l]`` is [B, T, d];
- ``carry``: blend with the carried state ``carry[l]`` [B, d] and replace it with the updated state; one position per
  call (generation, sequential prefill).

A layer can also *capture* its outputs for the caller (pass 1 outputs for the shift, or the updated states after a
``given`` pass).
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from sst_interp.model.adapters import ArchitectureAdapter
from sst_interp.model.state_stream import StateStreamParams

StateMode = Literal["off", "given", "carry"]
STATE_MODES: tuple[str, ...] = ("off", "given", "carry")


@dataclass
class StateStreamContext:
    """Per-model switchboard the SST layers consult on every forward call.

    Args:
        mode: how layers treat the state stream in the current call.
        given: per-layer states for ``given`` mode, each [B, T, d] (already shifted: entry t is C_{t-1}).
        carry: per-layer carried states for ``carry`` mode, each [B, d]; updated in place by each pass.
        capture: when set, each layer stores what it produced here (``capture_kind`` chooses what).
        capture_kind: ``"output"`` stores o [B, T, d]; ``"state"`` stores the updated state C [B, T, d].
        intervention: while an intervention is active (:class:`sst_interp.interventions.Intervener`), the object
            whose ``state_in``/``alpha``/``blended``/``layer_out`` methods may change those streams, whose
            ``freeze`` may keep the carried state (asked once per stateful layer and pass), and whose
            ``reads_no_state`` runs a carry pass with the stream off after a freeze of a pass that read none; the
            blend's streams are offered only where a state is read, ``layer_out`` in every layer and pass.
        edits: inside the compiled decode step of an intervening run, the same changes as tensors
            (:class:`~sst_interp.model.stream_edits.StreamEdits`, filled before each pass), applied by the same
            arithmetic every pass; ``intervention`` is then None.
    """

    mode: StateMode = "off"
    given: dict[int, torch.Tensor] = field(default_factory=dict)
    carry: dict[int, torch.Tensor] = field(default_factory=dict)
    capture: dict[int, torch.Tensor] | None = None
    capture_kind: Literal["output", "state"] = "output"
    intervention: Any = None  # an active sst_interp.interventions.Intervener (None: the clean model)
    edits: Any = None  # the compiled step's StreamEdits (None: no edits, or the eager Intervener)


class SSTLayerMixin:
    """Forward of an SST decoder layer; combined with the backbone's layer class by :func:`convert_layer`."""

    sst_index: int
    sst_state: StateStreamParams | None
    _sst_adapter: ArchitectureAdapter
    _sst_context: StateStreamContext

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:  # noqa: D102
        if args:
            raise TypeError("SST decoder layers take their attention inputs as keyword arguments")
        adapter, ctx = self._sst_adapter, self._sst_context
        h = adapter.attention_half(self, hidden_states, kwargs)
        params = self.sst_state
        index = self.sst_index
        if ctx.edits is not None:
            return _forward_edited(self, h, ctx)
        intervention = ctx.intervention
        # A freeze at a pass that read no state (position 0, iteration 1 under the prompt mode none) keeps the next
        # pass from reading one too: it runs with the stream off, as the frozen pass did.
        stream_off = ctx.mode == "carry" and intervention is not None and intervention.reads_no_state(index)
        if ctx.mode == "off" or params is None or stream_off:
            previous = None
            h_tilde = h
        elif ctx.mode == "given":
            # States come from the caller, who may hold them elsewhere; under a device map this layer's inputs were
            # moved to its device by accelerate's hook, but the state is not an input (a no-op on one device).
            previous = ctx.given[index].to(h.device)
            h_tilde = _blend(params, h, previous, ctx.intervention, index)
        else:
            if h.shape[1] != 1:
                raise ValueError(f"carry mode runs one position per call, got {h.shape[1]} positions")
            previous = ctx.carry[index].unsqueeze(1).to(h.device)
            h_tilde = _blend(params, h, previous, ctx.intervention, index)
        output = adapter.ffn_half(self, h_tilde)
        # layer_out exists in every layer and pass (also without a state stream, or with it off, as in position 0 of
        # the prompt mode none), so causal tracing can patch any layer; the Intervener leaves passes that emit no
        # token alone.
        frozen = False
        if intervention is not None:
            output = intervention.layer_out(index, output)
            if params is not None:
                frozen = intervention.freeze(index, read_state=previous is not None)
        if ctx.mode == "carry" and params is not None:
            if frozen:
                if previous is not None:
                    ctx.carry[index] = previous.squeeze(1)  # the next pass reads the state this pass read
                # else: this pass read none; the Intervener runs the next pass with the stream off
            elif previous is None:
                ctx.carry[index] = output.squeeze(1)  # as after a prompt pass with the stream off
            else:
                ctx.carry[index] = params.update(previous, output).squeeze(1)
        if ctx.capture is not None:
            if ctx.capture_kind == "state" and params is not None and previous is not None:
                state = params.update(previous, output)
                if frozen:
                    # the two-pass prefill's last column is position 0, iteration 1: its carried state stays the
                    # state it read (the Intervener freezes only the last column of a multi-column pass)
                    state = torch.cat([state[:, :-1], previous[:, -1:].to(state.dtype)], dim=1)
                ctx.capture[index] = state
            else:
                ctx.capture[index] = output
        return output


def _blend(params: StateStreamParams, h: torch.Tensor, previous: torch.Tensor, intervention: Any,
           index: int) -> torch.Tensor:
    """eq:blend; under an intervention, the same arithmetic in steps, each stream offered to it."""
    if intervention is None:
        return params.blend(h, previous)
    # the Intervener reads a reference state as this column's blend would (S scales by h under state_scale hidden)
    state = intervention.state_in(index, params.read_state(previous, h),
                                  lambda carried: params.read_state(carried, h[:, -1:]))
    base = params.blend_alpha()
    alpha = intervention.alpha(index, base, h.shape[1])  # [d], or [T, d] when only the last column is set
    mixed = torch.lerp(h.float(), state, alpha).to(h.dtype)
    if alpha is not base:
        # alpha 0 is the stream off, h~ = h exactly: the float32 lerp would round h in a float64 model
        off = (alpha == 0).all(-1)
        mixed = torch.where(off[..., None] if off.dim() else off, h, mixed)
    return intervention.blended(index, mixed)


def _forward_edited(layer: Any, h: torch.Tensor, ctx: StateStreamContext) -> torch.Tensor:
    """A carry pass (one column) under the compiled step's :class:`StreamEdits`: the streams the Intervener would
    change, changed by masks and affine maps, with no Python branch on what the pass's rules are."""
    if ctx.mode != "carry" or h.shape[1] != 1:
        raise ValueError("stream edits apply to carry passes of one column (the compiled decode step)")
    edits, params, index = ctx.edits, layer.sst_state, layer.sst_index
    if params is None:
        output = edits.layer_out(index, layer._sst_adapter.ffn_half(layer, h))
    else:
        previous = ctx.carry[index].unsqueeze(1).to(h.device)
        output = edits.layer_out(index, layer._sst_adapter.ffn_half(layer, edits.blend(index, params, h, previous)))
        ctx.carry[index] = edits.carry(index, params, previous, output)
    if ctx.capture is not None:
        ctx.capture[index] = output
    return output


_CLASS_CACHE: dict[type, type] = {}


def sst_layer_class(base: type) -> type:
    """The SST subclass of a decoder layer class (made once per base class)."""
    if issubclass(base, SSTLayerMixin):
        return base
    if base not in _CLASS_CACHE:
        _CLASS_CACHE[base] = type(f"SST{base.__name__}", (SSTLayerMixin, base), {"__module__": __name__})
    return _CLASS_CACHE[base]


def convert_layer(
    layer: nn.Module,
    index: int,
    adapter: ArchitectureAdapter,
    context: StateStreamContext,
    params: StateStreamParams | None,
) -> None:
    """Turn ``layer`` into an SST layer in place (its weights stay where they are).

    ``params`` becomes the submodule ``sst_state`` (``None`` for a layer without a state stream).
    """
    adapter.validate_layer(layer, index)
    layer.__class__ = sst_layer_class(type(layer))
    if "_old_forward" in vars(layer):
        # accelerate's dispatch (a device map) wrapped the layer's forward before this conversion: its hook calls the
        # bound method it saved, the backbone class's forward, which would silently skip the blend. Rebind it.
        layer._old_forward = types.MethodType(type(layer).forward, layer)
    layer.sst_index = index
    if params is not None:
        layer.sst_state = params
    else:
        layer.sst_state = None
    # Plain attributes (not submodules): the adapter and the shared context are not state to save or move.
    object.__setattr__(layer, "_sst_adapter", adapter)
    object.__setattr__(layer, "_sst_context", context)
