"""SSTModel: a Hugging Face causal LM with a state stream at every decoder layer (paper Sec. 2, Sec. 3.1).

Conversion is in place: the backbone's decoder layers become SST layers (see :mod:`sst_interp.model.layer`) and gain
a ``sst_state`` submodule holding ``theta`` and ``state_norm_weight`` (L x d each, float32). With the state mode
``off`` the model is exactly the backbone.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel

from sst_interp.kernels.errors import UsageError
from sst_interp.model import intervention_hook
from sst_interp.model.adapters import ArchitectureAdapter, adapter_for, decoder_layers
from sst_interp.model.config import SSTConfig
from sst_interp.model.loop_declaration import LoopDeclaration
from sst_interp.model.loops import SST_LOOP
from sst_interp.model.layer import STATE_MODES, StateMode, StateStreamContext, convert_layer
from sst_interp.model.placement import execution_device
from sst_interp.model.scan import shift_states
from sst_interp.model.state_stream import StateStreamParams


class SSTModel(nn.Module):
    """A State Stream Transformer built on a pretrained causal LM.

    Attributes:
        backbone: the Hugging Face model, converted in place.
        config: the :class:`SSTConfig`.
        adapter: the architecture adapter in use.
        layers: the decoder layers (``backbone.get_decoder().layers``), in order.
        context: the shared :class:`StateStreamContext` the layers read.
    """

    def __init__(self, backbone: PreTrainedModel, config: SSTConfig) -> None:
        super().__init__()
        self.backbone = backbone
        self.config = config
        self.adapter: ArchitectureAdapter = adapter_for(backbone)
        self.context = StateStreamContext()
        layers = decoder_layers(backbone)
        stateful = set(config.layer_indices(len(layers)))
        for index, layer in enumerate(layers):
            # The state stream of layer i lives where layer i runs (under a device map, layers sit on different
            # devices, and an offloaded layer's own parameters are on "meta").
            params = StateStreamParams(self.hidden_size, config).to(execution_device(layer)) if index in stateful \
                else None
            convert_layer(layer, index, self.adapter, self.context, params)

    @classmethod
    def from_backbone(cls, backbone: PreTrainedModel, config: SSTConfig | None = None) -> SSTModel:
        """Convert ``backbone`` (in place) into an SST with ``config`` (defaults to the paper's settings)."""
        return cls(backbone, config or SSTConfig())

    # ----------------------------------------------------------------------------------------------- structure
    @property
    def layers(self) -> nn.ModuleList:
        """The decoder layers, [L]."""
        return decoder_layers(self.backbone)

    @property
    def loop(self) -> LoopDeclaration:
        """The SST's loop declaration (:data:`~sst_interp.model.loops.SST_LOOP`): every layer once per iteration,
        iterations rerun the emitting pass, a per-layer state carries."""
        return SST_LOOP

    @property
    def num_layers(self) -> int:
        """Number of decoder layers L."""
        return len(self.layers)

    @property
    def hidden_size(self) -> int:
        """Hidden size d."""
        return int(self.backbone.get_input_embeddings().weight.shape[1])

    @property
    def device(self) -> torch.device:
        """Where the input embedding runs: the device inputs (token ids, masks, positions) go to.

        Under a device map other layers may run elsewhere; each layer's state lives on its own layer's device.
        """
        return execution_device(self.backbone.get_input_embeddings())

    @property
    def dtype(self) -> torch.dtype:
        """Compute dtype of the backbone."""
        return self.backbone.get_input_embeddings().weight.dtype

    def state_modules(self) -> dict[int, StateStreamParams]:
        """The per-layer state-stream parameter modules, keyed by layer index."""
        return {i: layer.sst_state for i, layer in enumerate(self.layers) if layer.sst_state is not None}

    def state_parameters(self) -> list[nn.Parameter]:
        """All SST parameters (theta and state-norm weight of every stateful layer), float32."""
        return [p for module in self.state_modules().values() for p in module.parameters()]

    def alphas(self) -> torch.Tensor:
        """Blend coefficients of every stateful layer: [L_stateful, d] float32 (detached)."""
        with torch.no_grad():
            return torch.stack([module.alpha() for module in self.state_modules().values()])

    def compile_blend(self, enabled: bool = True) -> SSTModel:
        """Run the blend (eq:blend) of inference passes as one ``torch.compile``-fused kernel per layer.

        Eager, the blend is about five small kernels per layer and pass (casts, RMSNorm, lerp); on a GPU at batch 1
        those launches cost more than their arithmetic. Passes that need gradients (training) always run eager.
        The fused kernel may round differently from the eager one in the last float32 bit. Returns ``self``.
        """
        for module in self.state_modules().values():
            module.compiled_blend = bool(enabled)
        return self

    def state_dict_sst(self) -> dict[str, torch.Tensor]:
        """The SST parameters alone, keyed ``layers.{i}.theta`` / ``layers.{i}.state_norm_weight``."""
        out: dict[str, torch.Tensor] = {}
        for index, module in self.state_modules().items():
            out[f"layers.{index}.theta"] = module.theta.detach().cpu().contiguous()
            out[f"layers.{index}.state_norm_weight"] = module.state_norm_weight.detach().cpu().contiguous()
        return out

    # ----------------------------------------------------------------------------------------------- modes
    @contextmanager
    def state_mode(
        self,
        mode: StateMode,
        *,
        given: dict[int, torch.Tensor] | None = None,
        carry: dict[int, torch.Tensor] | None = None,
        capture: str | None = None,
    ) -> Iterator[dict[int, torch.Tensor]]:
        """Run the enclosed forward calls in one state mode; restores ``off`` on exit (also on error).

        Args:
            mode: ``off``, ``given`` or ``carry``.
            given: for ``given``: per-layer states [B, T, d] (entry t is the state C_{t-1} position t reads).
            carry: for ``carry``: per-layer states [B, d]; the dict is updated in place by every pass.
            capture: ``"output"`` to collect each layer's output o [B, T, d], ``"state"`` for the updated
                state C [B, T, d]; ``None`` to collect nothing.

        Yields:
            The dict the layers capture into (empty unless ``capture`` is set).
        """
        if mode not in STATE_MODES:
            raise ValueError(f"unknown state mode {mode!r}; use one of {STATE_MODES}")
        stateful = self.state_modules()
        if mode == "given" and (given is None or set(stateful) - set(given)):
            raise ValueError("given mode needs a state for every stateful layer")
        if mode == "carry" and (carry is None or set(stateful) - set(carry)):
            raise ValueError("carry mode needs a carried state for every stateful layer")
        ctx = self.context
        captured: dict[int, torch.Tensor] = {}
        ctx.mode = mode
        ctx.given = given or {}
        ctx.carry = carry if carry is not None else {}
        ctx.capture = captured if capture else None
        ctx.capture_kind = capture or "output"
        try:
            yield captured
        finally:
            ctx.mode, ctx.given, ctx.carry, ctx.capture, ctx.capture_kind = "off", {}, {}, None, "output"
            # ctx.intervention is owned by the Intervener's context manager, not by the state mode

    def intervene(self, spec: Any, capture: Any = (), question_ids: Any = None, functions: Any = None) -> Any:
        """Interventions from Python: ``with sst.intervene(spec_or_specs, capture=["layer_out"]) as iv:
        iv.generate(prompts, depth, config)``, then ``iv.captured("layer_out")`` [rows, positions, iterations,
        layers, d]. ``spec`` is an InterventionSpec for every row or a list of them, one per row; live sources
        (``Operation("patch", source=j)`` or ``source="clean"``) read the same generation; ``functions`` are the Python
        functions ``map`` rules name. See :class:`~sst_interp.interventions.live.LiveIntervention`."""
        # what sst_interp.interventions registered on import (intervention_hook), so the model never imports it
        if intervention_hook.factory is None:
            raise UsageError("sst.intervene needs sst_interp.interventions (where InterventionSpec lives): import it "
                             "first")
        return intervention_hook.factory(self, spec, capture=capture, question_ids=question_ids, functions=functions)

    def zero_states(self, batch_size: int) -> dict[int, torch.Tensor]:
        """A zero carried state for every stateful layer: {l: [B, d]} in the backbone's dtype, on layer l's device."""
        return {
            index: torch.zeros(batch_size, self.hidden_size, dtype=self.dtype, device=module.theta.device)
            for index, module in self.state_modules().items()
        }

    # ----------------------------------------------------------------------------------------------- forward
    def decoder_forward(self, cache: Any = None, **kwargs) -> torch.Tensor:
        """Run the decoder stack (embeddings, layers, final norm) and return the last hidden state [B, T, d].

        ``cache`` is the KV cache (a transformers ``Cache``, or None), passed under the keyword the installed
        transformers takes (:func:`cache_keyword`).
        """
        decoder = self.backbone.get_decoder()
        return decoder(**{cache_keyword(decoder): cache}, **kwargs).last_hidden_state

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The LM head on final-norm hidden states [B, T, d] -> logits [B, T, V], at least float32 precision.

        Applies the backbone's final logit soft-capping when it has one (Gemma), as its own forward does.
        """
        logits = self.backbone.get_output_embeddings()(hidden)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        softcap = getattr(self.backbone.config, "final_logit_softcapping", None)
        if softcap is not None:
            logits = torch.tanh(logits / softcap) * softcap
        return logits

    def pass1_states(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        segment_starts: torch.Tensor | None = None,
    ) -> dict[int, torch.Tensor]:
        """Two-pass step 1 and the shift (paper sec:two_pass, eq:scan_recurrence with A=0).

        Runs the model with the blend off, keeping the graph (so pass-2 gradients reach pass 1), and shifts each
        stateful layer's output right by one position.

        Args:
            input_ids: [B, T].
            attention_mask: [B, T] (1 = real token), optional.
            position_ids: [B, T], optional.
            segment_starts: [B, T] bool, True where a new document starts (its state is zero), optional.

        Returns:
            {layer: S [B, T, d]} where S[:, t] is the pass-1 output at t-1 (zero at position 0, after padding and
            at segment starts).
        """
        with self.state_mode("off", capture="output") as outputs:
            self.decoder_forward(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
            )
        modules = self.state_modules()
        states = {}
        for index, output in outputs.items():
            if index not in modules:
                continue
            decay = modules[index].alpha() if self.config.update == "ema_linked" else None
            states[index] = shift_states(output, attention_mask, segment_starts, decay=decay)
        return states

    def two_pass_hidden(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        segment_starts: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Two-pass parallel forward (paper sec:two_pass): pass 1 without blend, shift, pass 2 with blend (eq:pass2_blend).

        Against the sequential recurrence the error is O(alpha^2) (eq:approx_bound, app:approx_bound with
        eq:approx_blend / eq:approx_state); tests/unit/model/test_sst_core.py checks the ratio ~4 per halving of alpha.

        Returns:
            Final-norm hidden states of pass 2, [B, T, d] (apply :meth:`lm_logits` or a chunked loss on them).
        """
        states = self.pass1_states(input_ids, attention_mask, position_ids, segment_starts)
        with self.state_mode("given", given=states):
            return self.decoder_forward(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
            )


def cache_keyword(decoder: nn.Module) -> str:
    """The keyword ``decoder.forward`` takes its KV cache under: ``cache`` in current transformers (which warns
    that ``past_key_values`` will be removed in 5.40), ``past_key_values`` in releases before the rename (5.17).
    Read from the signature once per class."""
    kind = type(decoder)
    if kind not in _CACHE_KEYWORDS:
        params = inspect.signature(decoder.forward).parameters
        _CACHE_KEYWORDS[kind] = "cache" if "cache" in params else "past_key_values"
    return _CACHE_KEYWORDS[kind]


_CACHE_KEYWORDS: dict[type, str] = {}
