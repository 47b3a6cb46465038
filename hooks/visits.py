"""The recorder of natively looping families (HRM-Text, ...): one forward call runs every iteration, so each hook
call says itself which (iteration, layer) it is.

The family's declaration (``sst_interp.model.loops``) hands over plain data: the modules whose output is a visit,
each with ``address(call kwargs) -> (iteration, layer)``, and the lens modules with ``iteration(call kwargs)`` and a
head. The recorded layer is the address's; the iteration is observed, not computed: the k-th visit of a recorded
layer within one forward call is its iteration k, and the k-th call of a lens module within the call is the lens's
iteration k. Where the declaration's own arithmetic would say otherwise, the model does not run as declared, which
the trace check refuses before a run is written (:mod:`sst_interp.model.loop_trace`). The captured rows have the
same columns as SST's (:class:`~sst_interp.hooks.recorder.Recorder`), so the writer, the reader and every analysis
take them unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

import torch
from torch import nn

from sst_interp.hooks.attention import AttentionCapture
from sst_interp.hooks.attention_weights import implementation
from sst_interp.hooks.capture import _Entries, layer_output, rows_to_columns, top_abs_indices
from sst_interp.hooks.config import PassState, RecordConfig
from sst_interp.hooks.logits import LogitCapture
from sst_interp.kernels.owned import OwnedHooks

VisitSite = tuple[nn.Module, Callable[[dict[str, Any]], tuple[int, int]]]
LensSite = tuple[nn.Module, Callable[[dict[str, Any]], int]]


class VisitRecorder:
    """Records the visits, sketches and per-iteration lens logits of one looped generation call.

    Args:
        visit_sites: ``[(module, address)]``: each call of ``module`` is the visit ``address(kwargs)``.
        lens_sites: ``[(module, iteration)]``: each call's last column [B, d] is a lens state of ``iteration``.
        lens_head: lens states [B, d] -> logits [B, V].
        hidden_size: d.
        question_ids: the question of each batch row, [B].
        config: :class:`RecordConfig`.
        caller: with ``config.attention``: the module whose calls carry the 2-D ``attention_mask`` keyword (the
            model), which names each key; and the model's attention implementation.
    """

    def __init__(self, visit_sites: Sequence[VisitSite], lens_sites: Sequence[LensSite],
                 lens_head: Callable[[torch.Tensor], torch.Tensor], hidden_size: int,
                 question_ids: Sequence[str], config: RecordConfig, caller: nn.Module | None = None,
                 attn_implementation: str = "eager") -> None:
        self.config = config
        self.question_ids = [str(q) for q in question_ids]
        self.visit_sites, self.lens_sites, self.lens_head = list(visit_sites), list(lens_sites), lens_head
        self.state = PassState()
        self.dtype = config.torch_dtype
        self.sketch_k = config.resolved_sketch_k(hidden_size)
        self.hidden, self.sketch = _Entries(), _Entries()
        self.logits = LogitCapture(self.state, config.top_k) if config.logits else None
        self.attention = AttentionCapture(self.state, config.attention) if config.attention is not None else None
        if self.attention is not None and caller is None:
            raise ValueError("recording attention needs the module whose calls carry the attention mask")
        self._caller, self._implementation = caller, attn_implementation
        self.hooks = OwnedHooks()
        self.tokens: dict[tuple[int, int], torch.Tensor] = {}
        # visits of each recorded layer, and calls of each lens site, in the forward call in progress
        self.visits_in_call: dict[int, int] = {}
        self.lens_in_call: dict[int, int] = {}

    @classmethod
    def for_model(cls, model: Any, question_ids: Sequence[str], config: RecordConfig) -> VisitRecorder:
        """A VisitRecorder on a :class:`~sst_interp.model.loop_model.LoopModel`'s declared sites."""
        loop = model.loop
        return cls(loop.visit_sites(model.backbone), loop.lens_sites(model.backbone), model.lens, model.hidden_size,
                   question_ids, config, caller=model.backbone,
                   attn_implementation=implementation(model.backbone.config))

    def __enter__(self) -> VisitRecorder:
        try:
            for module, address in self.visit_sites:
                self.hooks.forward_with_kwargs(module, self._visit_hook(address))
            for site, (module, iteration) in enumerate(self.lens_sites):
                self.hooks.forward_with_kwargs(module, self._lens_hook(site, iteration))
            if self.attention is not None:
                # each visited module once: its visits are addressed after the call, by the visit hook
                modules = list({id(module): module for module, _ in self.visit_sites}.values())
                self.attention.attach(self.hooks, self._caller, [(module, None) for module in modules],
                                      self._implementation)
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

    def _visit_hook(self, address: Callable[[dict[str, Any]], tuple[int, int]]):
        def hook(module: nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> None:
            # the address first, for every call: a declaration may count calls to tell the passes apart
            _, layer = address(kwargs)
            iteration = self.visits_in_call.get(layer, 0) + 1
            self.visits_in_call[layer] = iteration
            if self.attention is not None:  # what the visit's attention kept is filed under the same address
                self.attention.file(module, iteration, layer)
            kind = self.state.kind
            if kind is None:
                return
            value = layer_output(output)[:, -1, :].detach().to(self.dtype, copy=True)  # [B, d]
            self.state.iteration = iteration
            if kind == "full":
                self.hidden.add(self.state, layer, value)
            else:
                self.sketch.add(self.state, layer, top_abs_indices(value, self.sketch_k))

        return hook

    def _lens_hook(self, site: int, iteration_of: Callable[[dict[str, Any]], int]):
        def hook(module: nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> None:
            iteration_of(kwargs)  # for every call, as a visit's address: a declaration may count calls
            iteration = self.lens_in_call.get(site, 0) + 1
            self.lens_in_call[site] = iteration
            if self.state.kind is None or self.logits is None:
                return
            self.state.iteration = iteration
            self.logits.on_pass_end(self.lens_head(layer_output(output)[:, -1, :].detach()))

        return hook

    # ------------------------------------------------------------------------------------------ observer
    def on_pass_start(self, info: Any) -> None:
        """A forward call begins (every iteration of ``info.position``); decide whether it is recorded."""
        state = self.state
        self.visits_in_call.clear()
        self.lens_in_call.clear()
        if info.position is None or info.position >= self.config.window:
            state.kind = None
            return
        active = info.active.detach().to(torch.bool).clone()
        if active.shape[0] != len(self.question_ids):
            raise ValueError(f"the batch has {active.shape[0]} rows but the recorder has "
                             f"{len(self.question_ids)} question ids")
        state.active.append(active)
        state.index = len(state.active) - 1
        state.position, state.turn = int(info.position), int(info.turn)
        state.kind = "full" if info.position < self.config.full_window else "sketch"

    def on_pass_end(self, info: Any, logits: torch.Tensor | None) -> None:
        """The call ended; its lens logits were taken inside it (the last iteration's are the model's own)."""
        self.state.kind = None

    def on_token(self, position: int, token_ids: torch.Tensor, active: torch.Tensor) -> None:
        """The token of ``position`` was chosen."""
        if position < self.config.window:
            self.tokens[(self.state.turn, position)] = token_ids.detach().clone()

    def columns(self) -> dict[str, dict[str, Any]]:
        """Writer columns per table (``hidden``, ``sketch``, ``logits``, ``attention``), as
        :meth:`Recorder.columns`."""
        out = {"hidden": rows_to_columns(self.hidden, self.state.active, self.question_ids, "values"),
               "sketch": rows_to_columns(self.sketch, self.state.active, self.question_ids, "top_indices")}
        if self.logits is not None:
            out["logits"] = self.logits.columns(self.question_ids)
        if self.attention is not None:
            out["attention"] = self.attention.columns(self.question_ids)
        return {name: cols for name, cols in out.items() if cols is not None}
