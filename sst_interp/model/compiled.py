"""The compiled decode step (issue 35): one function per pass, a static KV cache, and no Python hook on the path.

A generation pass at a generated position is a pure function of (token ids, position ids, the KV cache, the carried
states): :meth:`DecodeStep._step` runs the decoder on one column of a
:class:`~sst_interp.model.column_cache.ColumnCache`, writes the new carried states into buffers at fixed addresses,
and returns the final hidden state and, when recording, every layer's output; the LM head is a second small graph,
run only by passes that need logits. ``torch.compile`` turns each into one graph (CUDA graphs on CUDA; on the CPU
the inductor with the weights frozen into the graph and packed for its GEMMs,
:data:`~sst_interp.model.compile_recipe.CPU_FREEZING`), compiled once per batch size: iterations of a position rerun
the same graph at the same cache column, and every depth shares it. Whether a run compiles is
:mod:`sst_interp.model.compile_options`.

What stays eager: the prompt (its width differs per batch), the depth decision between passes, the token choice and
the observer callbacks. An installed :class:`~sst_interp.interventions.apply.Intervener` runs inside the step as
tensors: an intervening session uses a second variant of the step (its own graph per batch size) whose layers apply
a :class:`~sst_interp.model.stream_edits.StreamEdits`, buffers at fixed addresses that the Intervener fills before
each pass from its rule matching (:mod:`sst_interp.interventions.compiled`): ``zero``, ``add``, ``set_alpha``,
``freeze``, and ``patch``/``mean``/``resample`` from a recorded run, per-row specs included. Live sources, captured
streams and two ``state_in`` references that can meet at one site are refused with one line naming
``--compile off``; the prompt passes keep the Intervener's Python hooks.

Exactness: the step performs the same operations as the eager session, on a cache whose unwritten columns are masked
out, so tokens agree and logits agree to float32 rounding (the attention reduces over ``max_columns`` keys instead of
the columns so far); ``tests/unit/model/test_compiled_step.py`` checks both.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch

from sst_interp.hooks.capture import layer_output
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.owned import OwnedHooks
from sst_interp.model.column_cache import ColumnCache, column_masks
from sst_interp.model.compile_options import CompileOptions, compile_refusal
from sst_interp.model.compile_recipe import compile_fn, cpu_options, freezes_weights, own_code, weights_fingerprint
from sst_interp.model.depth_policy import DepthPolicy, as_depth_policy
from sst_interp.model.generation import GenerationConfig, GenerationSession
from sst_interp.model.observers import GenerationObserver, PassInfo
from sst_interp.model.sst import SSTModel
from sst_interp.model.static_address import mark_static
from sst_interp.model.stream_edits import StreamEdits

def compiler_for(sst: SSTModel, options: CompileOptions, *, policy: DepthPolicy | None = None,
                 intervention: Any = None, capture_outputs: bool = False) -> StepCompiler | None:
    """The run's :class:`StepCompiler`, or None for eager decoding.

    ``--compile on`` on a setup the step cannot serve is a :class:`UsageError` (one line naming ``--compile off``);
    ``auto`` decodes eager there, and where :func:`~sst_interp.model.device_flags.compiles` says so.
    """
    if not options.active_for(sst.device):
        return None
    refusal = compile_refusal(sst, policy, intervention)
    if refusal is not None:
        if options.enabled == "on":
            raise UsageError(refusal)
        return None
    return StepCompiler(sst, options.mode_for(sst.device), capture_outputs=capture_outputs)


class DecodeStep:
    """The compiled decode step for one (batch size, cache columns) shape, with its buffers at fixed addresses.

    Holds the :class:`ColumnCache`, the ``real`` column mask [B, columns] and the carried states {layer: [B, d]}:
    every session of this shape reuses them, so the compiled graph (and, on CUDA, its captured graph) is made once
    per shape and variant, not once per batch of questions.

    Args:
        sst: the model.
        batch: batch size B.
        columns: cache columns (prompt width plus new tokens, rounded up by :class:`StepCompiler`).
        compile_mode: the ``torch.compile`` mode, or ``None`` to run the same function eager.
        stream: blend the state stream (``True``) or decode the backbone alone (``False``).
        capture_outputs: return every layer's output of each pass (for a recording observer).
        intervening: the variant whose layers apply :attr:`edits` (a
            :class:`~sst_interp.model.stream_edits.StreamEdits` the session fills before each pass); its graph
            differs from the clean step's, which applies none.
    """

    def __init__(self, sst: SSTModel, batch: int, columns: int, compile_mode: str | None, stream: bool,
                 capture_outputs: bool, intervening: bool = False) -> None:
        self.sst = sst
        self.batch, self.columns, self.stream = int(batch), int(columns), bool(stream)
        backbone_config = sst.backbone.config
        self.implementation = backbone_config._attn_implementation
        layer_types = getattr(backbone_config, "layer_types", None) or ()
        self.sliding_window = (getattr(backbone_config, "sliding_window", None)
                               if "sliding_attention" in layer_types else None)
        self.cache = ColumnCache(sst.num_layers, self.columns, sst.device)
        self.real = torch.zeros(self.batch, self.columns, dtype=torch.bool, device=sst.device)  # [B, columns]
        self.buffers = sst.zero_states(self.batch)  # {layer: [B, d]} at fixed addresses
        self.carry = dict(self.buffers)  # the dict the layers read and write; _pin puts the buffers back
        # The pass's token and position ids [B, 1], copied in: a caller's [B, 1] tensor may be a slice of the prompt
        # with strides (width, 1), a fresh token column (1, 1), and the graph's guards compare strides, so passing
        # them through compiled the step a second time.
        self.input_ids = torch.zeros(self.batch, 1, dtype=torch.long, device=sst.device)
        self.position_ids = torch.zeros(self.batch, 1, dtype=torch.long, device=sst.device)
        for tensor in (self.real, self.input_ids, self.position_ids, *self.buffers.values()):
            mark_static(tensor)
        self.capture_outputs = bool(capture_outputs)
        self.edits = (StreamEdits(sst.num_layers, tuple(sorted(sst.state_modules())), self.batch, sst.hidden_size,
                                  sst.dtype, sst.device) if intervening else None)
        self.cuda_graphs = compile_mode is not None and "reduce-overhead" in compile_mode and sst.device.type == "cuda"
        frozen = freezes_weights(compile_mode, sst.device)
        if compile_mode is None:
            self.fn, self.head = self._step, sst.lm_logits
        else:
            step, head, settings = self._step, sst.lm_logits, None
            if frozen:
                # Own copies of the code: dynamo keeps its compiled graphs per code object and, once the weights are
                # frozen, guards only on the parameters' identity, so a step made after an in-place weight edit
                # would otherwise reuse the graphs that froze the old values.
                step, head, settings = own_code(step), own_code(head), cpu_options(sst)
            self.fn = compile_fn(step, compile_mode, sst.device, settings)
            self.head = compile_fn(head, compile_mode, sst.device, settings)
        # the weights a CPU graph freezes at its first call: check_weights refuses a step whose model changed since
        self.weights = weights_fingerprint(sst) if frozen else None

    def check_weights(self) -> None:
        """Raise RuntimeError when the model's weights were replaced or edited after this step froze them."""
        if self.weights is not None and weights_fingerprint(self.sst) != self.weights:
            raise RuntimeError("the model's weights changed after its decode step was compiled on the CPU, which "
                               "freezes them into the graph: make a new StepCompiler (or decode with --compile off)")

    def reset(self) -> None:
        """Before a new batch: no column holds a token, every carried state is zero (the KV buffers need no reset:
        a column is read only after the pass that writes it)."""
        self.real.zero_()
        for buffer in self.buffers.values():
            buffer.zero_()
        self.carry.update(self.buffers)
        if self.edits is not None:
            self.edits.reset()

    def pin(self) -> None:
        """Copy states that eager code put in :attr:`carry` (the prefill, a per-position policy's restore) into the
        buffers, and put the buffers back in the dict: the step reads fixed addresses."""
        for index, buffer in self.buffers.items():
            state = self.carry[index]
            if state is not buffer:
                buffer.copy_(state)
                self.carry[index] = buffer

    def _step(self, input_ids: torch.Tensor, position_ids: torch.Tensor
              ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """One decode pass: input_ids [B, 1] and position_ids [B, 1] at the cache's current column.

        Returns the final-norm hidden state [B, 1, d] and, when the step captures, every layer's output
        {layer: [B, 1, d]} (an empty dict otherwise).
        """
        ctx = self.sst.context
        outputs: dict[int, torch.Tensor] = {}
        ctx.mode = "carry" if self.stream else "off"
        ctx.carry = self.carry
        ctx.capture = outputs if self.capture_outputs else None
        ctx.capture_kind = "output"
        ctx.edits = self.edits
        masks = column_masks(self.real, self.cache.column, 1, self.columns, self.sliding_window,
                             self.implementation, self.sst.dtype)
        hidden = self.sst.decoder_forward(input_ids=input_ids, attention_mask=masks, position_ids=position_ids,
                                          cache=self.cache, use_cache=True)
        ctx.mode, ctx.carry, ctx.capture, ctx.edits = "off", {}, None, None
        for index, buffer in self.buffers.items():
            buffer.copy_(self.carry[index])  # the layers put new tensors in the dict; the buffers keep the address
            self.carry[index] = buffer
        return hidden, outputs

    def run(self, input_ids: torch.Tensor, position_ids: torch.Tensor, want_logits: bool,
            ) -> tuple[torch.Tensor, torch.Tensor | None, dict[int, torch.Tensor]]:
        """One decode pass (:meth:`_step`, compiled) and, when ``want_logits``, the LM head (its own compiled graph,
        so passes without logits skip it and one step graph serves both).

        Returns hidden [B, 1, d] and logits [B, V] (None unless ``want_logits``), both the caller's to keep, and the
        layer outputs {layer: [B, 1, d]}, valid until the next call.
        """
        self.pin()
        if self.cuda_graphs:
            # The previous pass's graph outputs are dead (the caller kept clones): CUDA graph trees may reuse their
            # memory instead of recording a new graph because they still look alive.
            torch.compiler.cudagraph_mark_step_begin()
        self.input_ids.copy_(input_ids)
        self.position_ids.copy_(position_ids)
        # The eager Intervener (the prompt passes') stays out of the graph: the step's edits carry its rules.
        context = self.sst.context
        intervention, context.intervention = context.intervention, None
        try:
            hidden, outputs = self.fn(self.input_ids, self.position_ids)
        finally:
            # a pass that raised left the step's settings on the context; eager passes must not see its edits
            context.intervention, context.edits = intervention, None
        logits = self.head(hidden)[:, -1].clone() if want_logits else None
        return hidden.clone(), logits, outputs


class StepCompiler:
    """Makes and keeps one :class:`DecodeStep` per (batch size, column bucket): pass one to every generation call of
    a run, so compilation happens once per shape, not per batch.

    Args:
        sst: the model.
        compile_mode: the ``torch.compile`` mode, or ``None`` for the same step eager.
        stream: blend the state stream (``False``: the backbone alone, the plain baseline).
        capture_outputs: the steps return every layer's output (a recording run); one graph serves passes with and
            without a recording observer, which then ignore them.
        bucket: cache columns are rounded up to a multiple of this, so batches of different prompt widths share a
            shape.
    """

    def __init__(self, sst: SSTModel, compile_mode: str | None = "default", stream: bool = True,
                 capture_outputs: bool = False, bucket: int = 256) -> None:
        self.sst, self.compile_mode, self.stream, self.bucket = sst, compile_mode, stream, int(bucket)
        self.capture_outputs = bool(capture_outputs)
        self.steps: dict[tuple[int, int, bool], DecodeStep] = {}

    @property
    def recipe(self) -> str:
        """How the steps compile, for a run's numerics fingerprint: the ``torch.compile`` mode, plus ``+frozen`` where
        the weights are frozen (the CPU) and ``+gemm-autotune`` where each product's kernel is then picked by timing
        (:func:`~sst_interp.model.compile_recipe.cpu_options`)."""
        if not freezes_weights(self.compile_mode, self.sst.device):
            return str(self.compile_mode)
        return f"{self.compile_mode}+frozen" + ("+gemm-autotune" if "max_autotune" in cpu_options(self.sst) else "")

    def step_for(self, batch: int, columns: int, intervening: bool = False) -> DecodeStep:
        """The (reset) step for ``batch`` rows and at least ``columns`` cache columns; ``intervening`` picks the
        variant that applies stream edits (its own graph)."""
        rounded = -(-int(columns) // self.bucket) * self.bucket
        key = (int(batch), rounded, bool(intervening))
        if key not in self.steps:
            self.steps[key] = DecodeStep(self.sst, batch, rounded, self.compile_mode, self.stream,
                                         self.capture_outputs, intervening=bool(intervening))
        step = self.steps[key]
        step.check_weights()
        step.reset()
        return step


class CompiledSession(GenerationSession):
    """A :class:`GenerationSession` whose passes at generated positions run one compiled step each.

    The prompt prefill runs eager on the same :class:`ColumnCache`. Every decode pass (iteration 1 of a new position
    and each rerun) calls the compiled step; the KV entries of a rerun are written at the position's column again,
    and the carried states live in buffers at fixed addresses that the step overwrites.

    An observer that defines ``on_layer_outputs(outputs)`` receives, before ``on_pass_end`` of every pass at a
    generated position, the outputs of every layer at the pass's last column: ``{layer: [B, 1, d]}`` (a recorder
    needs no hooks). Inside a CUDA graph those tensors are overwritten by the next replay, so the observer copies
    what it keeps.

    Args:
        sst: the model.
        prompts, policy, config, observer, decode_fn: as for :class:`GenerationSession` (single turn).
        compiler: the run's :class:`StepCompiler`.
    """

    def __init__(self, sst: SSTModel, prompts: list[list[int]], policy: DepthPolicy, config: GenerationConfig,
                 observer: GenerationObserver | None = None, decode_fn=None,
                 compiler: StepCompiler | None = None) -> None:
        super().__init__(sst, prompts, policy, config, observer, decode_fn)
        self.intervention = sst.context.intervention  # an installed Intervener: its rules become the step's edits
        refusal = compile_refusal(sst, policy, self.intervention)
        if refusal is not None:
            raise UsageError(refusal)
        members = list(getattr(self.observer, "observers", [self.observer]))  # an ObserverGroup's, or the one
        if any(getattr(member, "layer_hooks", False) for member in members):
            # a hook inside the compiled graph would be traced into it, with the recorder's Python state as guards
            raise ValueError("a recorder on a compiled session takes the step's outputs: make it with "
                             "Recorder.for_model(..., layer_hooks=False)")
        self.output_observers = [member for member in members if callable(getattr(member, "on_layer_outputs", None))]
        self.wants_outputs = bool(self.output_observers)
        compiler = compiler or StepCompiler(sst, capture_outputs=self.wants_outputs)
        if self.intervention is not None and not compiler.stream:
            raise UsageError("interventions change the state stream, which a step without it (the plain backbone) "
                             "does not run; use --compile off")
        self.step = compiler.step_for(self.batch, self.input_ids.shape[1] + config.max_new_tokens,
                                      intervening=self.intervention is not None)
        self.cache = self.step.cache
        self.real = self.step.real
        self.carry = self.step.carry
        self.step_column: int | None = None  # the cache column the last decode pass wrote
        if self.wants_outputs and not self.step.capture_outputs:
            raise ValueError("a recording observer needs a StepCompiler(capture_outputs=True)")

    # -- passes (GenerationSession calls these)
    def _run(self, info: PassInfo, mode: str, input_ids: torch.Tensor, position_ids: torch.Tensor,
             want_logits: bool, attention_mask: torch.Tensor | None = None, given=None,
             capture: str | None = None, use_cache: bool = True):
        seen = self.mask if attention_mask is None else attention_mask  # [B, columns so far]
        width = input_ids.shape[1]
        first = seen.shape[1] - width
        info = PassInfo(position=info.position, iteration=info.iteration, depth=info.depth,
                        active=info.active.clone(), turn=self.turn)
        decode = mode == "carry" and width == 1 and use_cache and given is None and capture is None
        if decode:
            if first != self.step_column:  # a new position; its reruns keep the column and its mask entry
                self.cache.set_column(first)
                self.real[:, first] = seen[:, first].bool()
                self.step_column = first
            self.observer.on_pass_start(info)
            if self.step.edits is not None:
                self.intervention.fill_edits(self.step.edits)
            hidden, logits, outputs = self.step.run(input_ids, position_ids, bool(want_logits))
            if self.wants_outputs and info.position is not None:
                self._layer_outputs(outputs)
            self.last_hidden = hidden
            self.observer.on_pass_end(info, logits)
            return logits, {}
        return self._run_eager(info, mode, input_ids, position_ids, want_logits, seen, first, given, capture,
                               use_cache)

    def _run_eager(self, info: PassInfo, mode: str, input_ids, position_ids, want_logits: bool, seen, first: int,
                   given, capture: str | None, use_cache: bool):
        """A prompt pass (any width, any state mode) on the column cache, with the same masks the step builds."""
        width = input_ids.shape[1]
        if use_cache:
            self.step_column = None  # the next decode pass sets its column again
            self.cache.set_column(first)
            self.real[:, first: first + width] = seen[:, first:].bool()
            masks = column_masks(self.real, first, width, self.cache.max_columns, self.step.sliding_window,
                                 self.step.implementation, self.sst.dtype)
        else:  # two-pass pass 1: the segment alone
            masks = column_masks(seen[:, first:].bool(), 0, width, width, self.step.sliding_window,
                                 self.step.implementation, self.sst.dtype)
        self.observer.on_pass_start(info)
        with self._eager_outputs(info) as outputs, \
                self.sst.state_mode(mode, given=given, carry=self.carry if mode == "carry" else None,
                                    capture=capture) as captured:
            hidden = self.sst.decoder_forward(input_ids=input_ids, attention_mask=masks, position_ids=position_ids,
                                              cache=self.cache if use_cache else None, use_cache=use_cache)
        if outputs is not None:
            self._layer_outputs(outputs)
        self.last_hidden = hidden[:, -1:]
        logits = self.sst.lm_logits(self.last_hidden)[:, -1] if want_logits else None
        self.observer.on_pass_end(info, logits)
        return logits, captured

    def _layer_outputs(self, outputs: dict[int, torch.Tensor]) -> None:
        for observer in self.output_observers:
            observer.on_layer_outputs(outputs)

    @contextmanager
    def _eager_outputs(self, info: PassInfo) -> Iterator[dict[int, torch.Tensor] | None]:
        """For a recording observer, every layer's output at the pass's last column, through hooks owned for this
        pass alone (the compiled step captures without hooks; these are removed before it runs)."""
        if not self.wants_outputs or info.position is None:
            yield None
            return
        outputs: dict[int, torch.Tensor] = {}
        hooks = OwnedHooks()

        def keep(index: int):
            def hook(module: Any, args: Any, output: Any) -> None:
                outputs[index] = layer_output(output)[:, -1:]
            return hook

        try:
            for index, layer in enumerate(self.sst.layers):
                hooks.forward(layer, keep(index))
            yield outputs
        finally:
            hooks.close()


def generate_compiled(sst: SSTModel, prompts: list[list[int]], depth: int | DepthPolicy = 1,
                      config: GenerationConfig | None = None, observer: GenerationObserver | None = None,
                      decode_fn=None, compiler: StepCompiler | None = None):
    """:func:`~sst_interp.model.generation.generate` through :class:`CompiledSession` (same arguments and result).
    Pass the same ``compiler`` to every call of a run (a new one compiles again)."""
    policy = as_depth_policy(depth)
    config = config or GenerationConfig()
    with torch.no_grad(), CompiledSession(sst, prompts, policy, config, observer, decode_fn, compiler) as session:
        return session.run_turn()
