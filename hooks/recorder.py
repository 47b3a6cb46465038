"""Recorder: the generation observer that records one batch inline, through hooks it owns.

Usage (one Recorder per generation call)::

    with Recorder.for_model(sst, question_ids, RecordConfig(full_positions=10)) as rec:
        result = generate(sst, prompts, depth=3, config=gen_config, observer=rec)
    columns = rec.columns()     # {"hidden": ..., "sketch": ..., "logits": ..., "gates": ...} for RunWriter.submit

Hooks are registered on entry and all removed on exit, also when generation raises. Recording follows the
observer's pass announcements: a pass with ``PassInfo.position`` None (prompt passes, two-pass pass 1) or beyond
the recording window records nothing; rows marked inactive for a pass (finished generating) are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any

import torch
from torch import nn

from sst_interp.hooks.attention import AttentionCapture
from sst_interp.hooks.attention_weights import implementation
from sst_interp.hooks.capture import LayerCapture
from sst_interp.hooks.config import PassState, RecordConfig
from sst_interp.hooks.gates import GateCapture
from sst_interp.hooks.logits import LogitCapture
from sst_interp.kernels.owned import OwnedHooks


class Recorder:
    """Records hidden states, sketches, logit summaries and gate activity of one generation call.

    Args:
        layers: the decoder layers [L] to hook (``sst.layers``).
        hidden_size: d.
        question_ids: the question of each batch row, [B].
        config: :class:`RecordConfig`.
        decoder: with ``config.attention``: the module whose calls carry the 2-D ``attention_mask`` keyword (the
            decoder stack), which names each key; and the model's attention implementation.
    """

    def __init__(self, layers: Sequence[nn.Module], hidden_size: int, question_ids: Sequence[str],
                 config: RecordConfig, layer_hooks: bool = True, decoder: nn.Module | None = None,
                 attn_implementation: str = "eager") -> None:
        self.config = config
        self.layer_hooks = layer_hooks
        self.question_ids = [str(q) for q in question_ids]
        self.state = PassState()
        self.layers = LayerCapture(layers, self.state, config, hidden_size)
        self.logits = LogitCapture(self.state, config.top_k) if config.logits else None
        self.gates = GateCapture(layers, self.state, config.gate_sign_bits) if config.gates else None
        self.attention = AttentionCapture(self.state, config.attention) if config.attention is not None else None
        if self.attention is not None and (decoder is None or not layer_hooks):
            raise ValueError("recording attention needs the layer hooks and the decoder module (Recorder.for_model)")
        self._decoder, self._implementation, self._layer_modules = decoder, attn_implementation, list(layers)
        self.hooks = OwnedHooks()
        self.tokens: dict[tuple[int, int], torch.Tensor] = {}

    @classmethod
    def for_model(cls, sst: Any, question_ids: Sequence[str], config: RecordConfig,
                  layer_hooks: bool = True) -> Recorder:
        """A Recorder on ``sst.layers`` with ``sst.hidden_size``. ``layer_hooks=False`` for a compiled session
        (:class:`~sst_interp.model.compiled.CompiledSession`), which hands every pass's layer outputs to
        :meth:`on_layer_outputs` instead."""
        if config.attention is None:
            return cls(sst.layers, sst.hidden_size, question_ids, config, layer_hooks)
        return cls(sst.layers, sst.hidden_size, question_ids, config, layer_hooks, decoder=sst.backbone.get_decoder(),
                   attn_implementation=implementation(sst.backbone.config))

    # ------------------------------------------------------------------------------------------ hooks
    def __enter__(self) -> Recorder:
        try:
            if self.layer_hooks:
                self.layers.attach(self.hooks)
            if self.gates is not None:
                self.gates.attach(self.hooks)
            if self.attention is not None:
                sites = [(layer, index) for index, layer in enumerate(self._layer_modules)
                         if self.config.attention.keeps_layer(index)]
                self.attention.attach(self.hooks, self._decoder, sites, self._implementation)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Remove every hook (and the attention kernel's wrapper); idempotent."""
        self.hooks.close()
        if self.attention is not None:
            self.attention.close()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
        self.state.kind = None

    # ------------------------------------------------------------------------------------------ observer
    def on_pass_start(self, info: Any) -> None:
        """Observer: a decoder pass begins; decide whether (and how) it is recorded."""
        state = self.state
        position = info.position
        if position is None or position >= self.config.window:
            state.kind = None
            return
        active = info.active.detach().to(torch.bool).clone()
        if active.shape[0] != len(self.question_ids):
            raise ValueError(f"the batch has {active.shape[0]} rows but the recorder has "
                             f"{len(self.question_ids)} question ids")
        state.active.append(active)
        state.index = len(state.active) - 1
        state.position, state.iteration, state.turn = int(position), int(info.iteration), int(info.turn)
        state.kind = "full" if position < self.config.full_window else "sketch"

    def on_layer_outputs(self, outputs: dict[int, torch.Tensor]) -> None:
        """Compiled-session observer: every layer's output {layer: [B, 1, d]} of the pass just run (no hooks ran)."""
        if self.layer_hooks:
            raise RuntimeError("this Recorder hooks the layers; make it with layer_hooks=False for a compiled session")
        for index in sorted(outputs):
            self.layers.keep(index, outputs[index])

    def on_pass_end(self, info: Any, logits: torch.Tensor | None) -> None:
        """Observer: a pass ended with ``logits`` [B, V] (or None when the LM head did not run)."""
        self.layers.finish_pass()
        if self.logits is not None:
            self.logits.on_pass_end(logits)
        self.state.kind = None

    def on_token(self, position: int, token_ids: torch.Tensor, active: torch.Tensor) -> None:
        """Observer: the token of ``position`` was chosen (kept for checks; the writer takes text from the result)."""
        if position < self.config.window:
            self.tokens[(self.state.turn, position)] = token_ids.detach().clone()

    # ------------------------------------------------------------------------------------------ output
    def columns(self) -> dict[str, dict[str, Any]]:
        """Writer columns per table (``hidden``, ``sketch``, ``logits``, ``gates``, ``attention``); empty tables are
        left out.

        ``hidden["values"]`` is [N, d] in the recorded dtype and ``sketch["top_indices"]`` [N, k] int32, both
        still on the model's device (on the CPU when a device map spreads the layers over several devices; the
        writer thread moves them, and stores the indices as uint16 when d < 65,536); coordinates are numpy [N]
        int32.
        """
        out: dict[str, dict[str, Any] | None] = dict(self.layers.columns(self.question_ids))
        if self.logits is not None:
            out["logits"] = self.logits.columns(self.question_ids)
        if self.gates is not None:
            out["gates"] = self.gates.columns(self.question_ids)
        if self.attention is not None:
            out["attention"] = self.attention.columns(self.question_ids)
        return {name: cols for name, cols in out.items() if cols is not None}
