"""A latent-iteration model transformers runs natively (HRM-Text, ...), with its loop declaration, and its greedy
generation with the KV cache, announcing every forward call to an observer (the recorder).

Unlike SST, whose iterations are reruns of the emitting pass, these families run all their loops inside one forward
call per token: the depth is a config field (:attr:`~sst_interp.model.loop_declaration.LoopDeclaration.depth_key`) that
:meth:`LoopModel.at_depth` sets for the duration of a generation, and the recorder reads the visits from hooks on
the family's own modules (:attr:`~sst_interp.model.loop_declaration.LoopDeclaration.visit_sites`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from sst_interp.kernels.errors import UsageError
from sst_interp.model.backbone import load_folder_part, parse_dtype
from sst_interp.model.device_flags import auto_dtype
from sst_interp.model.generation import GenerationConfig, GenerationResult, left_pad
from sst_interp.model.loop_declaration import LoopDeclaration
from sst_interp.model.loop_folder import apply_loop_options, check_weight_shapes, skeleton
from sst_interp.model.loops import loop_for_model_type, native_loop
from sst_interp.model.observers import PassInfo


class LoopObserver(Protocol):
    """Receives every forward call of a looped generation (one call runs every iteration of its positions)."""

    def on_pass_start(self, info: PassInfo) -> None: ...

    def on_pass_end(self, info: PassInfo, logits: torch.Tensor | None) -> None: ...

    def on_token(self, position: int, token_ids: torch.Tensor, active: torch.Tensor) -> None: ...


class LoopModel:
    """A natively looping causal LM and its :class:`LoopDeclaration`.

    Attributes:
        backbone: the transformers model (``HrmTextForCausalLM``, ...), unchanged.
        loop: the family's declaration.
    """

    def __init__(self, backbone: nn.Module, loop: LoopDeclaration | None = None) -> None:
        model_type = getattr(getattr(backbone, "config", None), "model_type", None)
        found = loop or native_loop(model_type)
        if found is None or found.visit_sites is None:
            loop_for_model_type(model_type)  # an unknown type: the error naming every family
            raise UsageError(f"{model_type!r} is an SST backbone, not a natively looping family")
        self.backbone = backbone
        self.loop = found

    def intervene(self, *args: Any, **kwargs: Any) -> Any:
        """Refused: the live-source context is the SST's; a looped family takes a recorded-run spec through
        :func:`~sst_interp.interventions.loops.intervene_loop`."""
        raise UsageError(f"{self.loop.family} has no sst.intervene context (live sources, per-row specs, captures "
                         f"are SST-only); use sst_interp.interventions.loops.intervene_loop with one spec")

    @property
    def config(self) -> Any:
        """The backbone's config (its depth field changes under :meth:`at_depth`)."""
        return self.backbone.config

    @property
    def layer_names(self) -> list[str]:
        """The recorded layer axis (:attr:`LoopDeclaration.layer_names`)."""
        return self.loop.layer_names(self.config)

    @property
    def num_layers(self) -> int:
        """Size of the recorded layer axis."""
        return len(self.layer_names)

    @property
    def hidden_size(self) -> int:
        """d."""
        return int(self.backbone.get_input_embeddings().weight.shape[1])

    @property
    def device(self) -> torch.device:
        """Where the inputs go."""
        return self.backbone.get_input_embeddings().weight.device

    @property
    def dtype(self) -> torch.dtype:
        """Compute dtype."""
        return self.backbone.get_input_embeddings().weight.dtype

    @contextmanager
    def at_depth(self, depth: int) -> Iterator[LoopModel]:
        """Run the enclosed calls at ``depth`` (checked by the declaration); the config is restored on exit."""
        self.loop.check_depth(depth)
        fields = self.loop.depth_fields(self.config, depth)
        before = {name: getattr(self.config, name) for name in fields}
        try:
            for name, value in fields.items():
                setattr(self.config, name, value)
            yield self
        finally:
            for name, value in before.items():
                setattr(self.config, name, value)

    def lens(self, state: torch.Tensor) -> torch.Tensor:
        """The family's head on lens states [B, d] -> logits [B, V], at least float32."""
        assert self.loop.lens_head is not None
        logits = self.loop.lens_head(self.backbone, state)
        return logits.to(torch.promote_types(logits.dtype, torch.float32))

    def forward_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                       cache: Any) -> tuple[torch.Tensor, Any]:
        """One forward call with the cache: returns (logits of the last column [B, V], the cache)."""
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            cache=cache, use_cache=True, logits_to_keep=1)
        logits = out.logits[:, -1]
        return logits.to(torch.promote_types(logits.dtype, torch.float32)), out.cache


def loop_compute_dtype(config: Any, dtype: str | torch.dtype,
                       device: str | torch.device) -> tuple[torch.dtype, str | None]:
    """The dtype a looped model computes in, and a note when ``--dtype auto`` casts its weights to a narrower one.

    ``auto`` (:func:`~sst_interp.model.device_flags.auto_dtype`: bfloat16 on a GPU, float32 on the CPU) honours a
    float64 folder on the CPU, whose exactness tests compute in float64: it computes in float64 there (a run still
    stores its hidden states in float32). Where ``auto`` computes in a dtype narrower than the folder's weights (a
    float32 or float64 folder in bfloat16 on a GPU) the note says what they were cast to. A named dtype is what the
    caller asked for: no note.

    Returns:
        ``(torch dtype, note or None)``.
    """
    if not isinstance(dtype, str):
        return dtype, None
    if dtype != "auto":
        return parse_dtype(dtype), None
    folder = getattr(config, "dtype", None)
    folder = parse_dtype(folder) if isinstance(folder, str) and folder in ("float32", "float64", "bfloat16",
                                                                        "float16") else folder
    chosen = parse_dtype(auto_dtype(str(device)))
    if folder == torch.float64 and str(device).startswith("cpu"):
        return torch.float64, None
    if isinstance(folder, torch.dtype) and folder.is_floating_point and torch.finfo(folder).bits > \
            torch.finfo(chosen).bits:
        name = str(chosen).removeprefix("torch.")
        return chosen, (f"[--dtype auto: the folder's {str(folder).removeprefix('torch.')} weights compute in {name} "
                        f"on {device}; pass --dtype float32 to compute in float32]")
    return chosen, None


def load_loop_backbone(folder: str, loop: LoopDeclaration, dtype: str | torch.dtype = "float32",
                       device: str | torch.device = "cpu", trust_remote_code: bool = False,
                       options: dict[str, str] | None = None,
                       say: Callable[[str], None] | None = None) -> tuple[nn.Module, Any]:
    """Load the model of a looping family from local ``folder`` and its tokenizer: the causal LM transformers (or,
    with ``trust_remote_code``, the folder's own code) builds from its config; for a wrapper type of
    :attr:`LoopDeclaration.wrapped`, the text model alone, from the wrapper's ``text_config`` and the weights under
    its prefix.

    Refused with a :class:`UsageError` before any weight is read: a config its config class refuses (Dory's layer
    counts, an unknown cache mode: :func:`~sst_interp.model.backbone.load_folder_part`), an ``options`` setting the
    family does not declare or a value its config class does not allow
    (:func:`~sst_interp.model.loop_folder.apply_loop_options`), and
    weights whose shapes do not fit the config (:func:`~sst_interp.model.loop_folder.check_weight_shapes`).

    Args:
        folder: the model folder.
        loop: the family's declaration.
        dtype: a dtype name, ``auto`` (:func:`loop_compute_dtype`) or a torch dtype.
        device: where the model goes.
        trust_remote_code: run the folder's own modelling code.
        options: ``--loop-option`` settings, set on the config before the model is built.
        say: receives the note of :func:`loop_compute_dtype`, if any.

    Returns:
        ``(model, tokenizer)``, the model in eval mode on ``device``.
    """
    config = load_folder_part(folder, "config", AutoConfig.from_pretrained, folder,
                              trust_remote_code=trust_remote_code)
    prefix = loop.wrapped.get(getattr(config, "model_type", None) or "")
    text_config = config.text_config if prefix is not None else config
    apply_loop_options(loop, text_config, dict(options or {}))
    check_weight_shapes(folder, skeleton(folder, text_config, trust_remote_code), text_config, prefix)
    torch_dtype, note = loop_compute_dtype(config, dtype, device)
    if note is not None and say is not None:
        say(note)
    tokenizer = load_folder_part(folder, "tokenizer", AutoTokenizer.from_pretrained, folder,
                                 trust_remote_code=trust_remote_code)
    kwargs: dict[str, Any] = {"dtype": torch_dtype, "attn_implementation": "eager",
                              "trust_remote_code": trust_remote_code, "config": text_config}
    if prefix is not None:
        # the wrapper's other weights (the vision tower) are deliberately left unread: transformers' report of them
        # as unexpected keys says nothing about the text model, so it is not shown
        kwargs.update(key_mapping={"^" + prefix.replace(".", r"\."): "model."})
        before = hf_logging.get_verbosity()
        hf_logging.set_verbosity(logging.ERROR)
        try:
            model = load_folder_part(folder, "weights", _load_weights, folder, **kwargs)
        finally:
            hf_logging.set_verbosity(before)
    else:
        model = load_folder_part(folder, "weights", _load_weights, folder, **kwargs)
    return model.to(device).eval(), tokenizer


def _load_weights(folder: str, **kwargs: Any) -> nn.Module:
    """``AutoModelForCausalLM.from_pretrained``; its refusal of weights whose sizes do not fit the config (a
    mismatch :func:`~sst_interp.model.loop_folder.check_weight_shapes` could not pair with a module of the model:
    a checkpoint that names its tensors otherwise) is a ValueError, so that the folder is named in one line."""
    try:
        return AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    except RuntimeError as err:
        if "mismatched_sizes" not in str(err):
            raise
        raise ValueError("its weights' sizes do not fit its config.json (transformers' loading report above names "
                         "them); correct config.json") from err


def generate_looped(model: LoopModel, prompts: list[list[int]], depth: int, config: GenerationConfig | None = None,
                    observer: LoopObserver | None = None, decode_fn: Any = None,
                    force: Callable[[int, torch.Tensor], torch.Tensor] | None = None,
                    gradients: bool = False) -> GenerationResult:
    """Greedy generation at ``depth`` with the KV cache, one forward call per token.

    Generated position 0 is the prefill (its last column); every later position is one call on the cache. The
    observer hears ``on_pass_start``/``on_pass_end`` around each call (``PassInfo.iteration`` is the depth: the
    call runs every iteration) and ``on_token`` for each chosen token.

    Args:
        model: the :class:`LoopModel`.
        prompts: token id lists, one per row (left-padded; batch size 1 is what the exactness tests pin).
        depth: the family's loop count (:attr:`LoopDeclaration.depth_meaning`).
        config: max_new_tokens, EOS ids, stop strings and the pad id are read; the prompt mode does not apply.
        observer: receives every call.
        decode_fn: token ids -> text, for stop strings.
        force: ``(position, chosen [B] long) -> the tokens [B] fed on``: the tokens of a forced generation (the
            intervention experiments read a target in a fixed context); None: the greedy choice.
        gradients: run with autograd on (attribution patching); off, the generation runs under ``no_grad``.

    Returns:
        :class:`GenerationResult` (``iterations`` holds ``depth`` for every token).
    """
    config = config or GenerationConfig()
    if config.do_sample:
        raise UsageError(f"{model.loop.family} runs are greedy; sampling is not supported for this family")
    ids, mask = left_pad(prompts, config.pad_token_id, model.device)
    batch = ids.shape[0]
    active = torch.ones(batch, dtype=torch.bool, device=ids.device)
    generated: list[list[int]] = [[] for _ in prompts]
    stops = ["max_new_tokens"] * batch
    eos = set(config.eos_token_ids)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with model.at_depth(depth), torch.set_grad_enabled(gradients):
        cache = None
        tokens, step_positions = ids, positions
        for position in range(config.max_new_tokens):
            info = PassInfo(position=position, iteration=depth, depth=depth, active=active.clone())
            if observer is not None:
                observer.on_pass_start(info)
            logits, cache = model.forward_logits(tokens, mask, step_positions, cache)
            if observer is not None:
                observer.on_pass_end(info, logits)
            token = torch.where(active, logits.argmax(-1), torch.full_like(active, config.pad_token_id,
                                                                          dtype=torch.long))
            if force is not None:
                token = torch.where(active, force(position, token), token)
            if observer is not None:
                observer.on_token(position, token, active.clone())
            for row in range(batch):
                if not active[row]:
                    continue
                generated[row].append(int(token[row]))
                if int(token[row]) in eos:
                    stops[row], active[row] = "eos", False
                elif config.stop_strings and decode_fn is not None and any(
                        stop in decode_fn(generated[row]) for stop in config.stop_strings):
                    stops[row], active[row] = "stop_string", False
            if not bool(active.any()):
                break
            # a finished row's column is masked out: its context stays exactly its own tokens
            mask = torch.cat([mask, active.long()[:, None]], dim=1)
            step_positions = step_positions[:, -1:] + active.long()[:, None]
            tokens = token[:, None]
    return GenerationResult(token_ids=generated, stop_reasons=stops, chosen_depth=[depth] * batch,
                            depth_policy=f"fixed({depth})",
                            iterations=[[depth] * len(row) for row in generated])
