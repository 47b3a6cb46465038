"""The model being trained: backbone (+ SST conversion) + LoRA adapters (paper app:training_setup).

- LoRA via peft on the configured modules (paper: attention QKV+O, MLP gate/up/down, lm_head; r=64, alpha=64,
  dropout 0.05); QLoRA (NF4 via bitsandbytes) when CUDA is present and ``quantize`` allows it, plain LoRA otherwise.
- The SST parameters (blend logits and state-norm weights, float32) stay trainable after peft freezes everything
  that is not an adapter.
- Tied embeddings (Gemma): the lm_head adapter acts on the shared matrix, so the input embedding sees the same
  low-rank update (the paper: "LoRA adaptation of the lm_head trains both the output distribution over these tokens
  and their input representations simultaneously"). This also makes merging the adapter into the tied weight
  (what :func:`sst_interp.model.checkpoint.load_checkpoint` does) reproduce the trained model exactly.
- Gradient checkpointing through transformers' layer checkpointing. The SST layers read their mode (off / given)
  from a context shared by the model; the recomputation in the backward pass runs after that context was reset, so
  a ``context_fn`` restores, for each recomputed layer, the context it saw in the forward pass.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig, PreTrainedModel

from sst_interp.kernels.errors import UsageError
from sst_interp.model import SSTConfig, SSTModel
from sst_interp.model.backbone import DEFAULT_MODEL, ensure_default_backbone, load_backbone
from sst_interp.model.checkpoint import quiet_tied_adapter_warning
from sst_interp.model.devices import check_device, rank_device, resolve_dtype
from sst_interp.train.config import TRAIN_DTYPES, TrainConfig
from sst_interp.train.data import Batch
from sst_interp.train.loss import lm_head_logits


@dataclass
class TrainModel:
    """A backbone with LoRA adapters and, unless it is the baseline, a state stream.

    Args:
        backbone: the Hugging Face causal LM (adapters injected in place).
        peft_model: the peft wrapper of ``backbone`` (saves the adapter).
        sst: the SST built on ``backbone``; ``None`` for the baseline.
    """

    backbone: PreTrainedModel
    peft_model: nn.Module
    sst: SSTModel | None

    @property
    def is_baseline(self) -> bool:
        """True for the matched baseline (no state stream, one pass)."""
        return self.sst is None

    @property
    def device(self) -> torch.device:
        """Device of the input embedding."""
        return self.backbone.get_input_embeddings().weight.device

    def hidden(self, batch: Batch) -> torch.Tensor:
        """Final-norm hidden states [B, T, d] of the training forward.

        SST: pass 1 with the blend off (graph kept), shift, pass 2 with the blend on (sec:two_pass). Baseline: one
        plain pass. Both get the same position ids (restarting per document, so attention is block-diagonal) and no
        attention mask.
        """
        if self.sst is not None:
            return self.sst.two_pass_hidden(
                batch.input_ids, None, batch.position_ids, batch.segment_starts
            )
        return self.backbone.get_decoder()(
            input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False
        ).last_hidden_state

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """LM head (adapter and soft-cap included): hidden [N, d] -> logits [N, V] float32."""
        return lm_head_logits(self.backbone, hidden)

    def lora_parameters(self) -> list[nn.Parameter]:
        """The trainable adapter parameters."""
        return [p for name, p in self.peft_model.named_parameters() if "lora_" in name and p.requires_grad]

    def sst_parameters(self) -> list[nn.Parameter]:
        """The SST parameters (empty for the baseline)."""
        return [] if self.sst is None else self.sst.state_parameters()

    def train(self) -> None:
        """Training mode (LoRA dropout and gradient checkpointing active)."""
        self.backbone.train()

    def eval(self) -> None:
        """Evaluation mode."""
        self.backbone.eval()


# ------------------------------------------------------------------------------------------------ loading
def training_device(config: TrainConfig, local_rank: int | None = None) -> torch.device:
    """The device ``config`` trains on as process ``local_rank`` of its machine (None: alone): ``--device`` resolved
    by :func:`sst_interp.model.devices.check_device`, then :func:`~sst_interp.model.devices.rank_device`."""

    return torch.device(rank_device(check_device(config.device), local_rank))


def training_dtype(config: TrainConfig, device: torch.device) -> torch.dtype:
    """``--dtype`` of ``config`` on ``device`` (:func:`sst_interp.model.devices.resolve_dtype`: ``auto`` is
    bfloat16 on CUDA, float32 on the CPU)."""

    return getattr(torch, resolve_dtype(config.dtype, device.type, allowed=TRAIN_DTYPES))


def wants_nf4(config: TrainConfig, device: torch.device) -> bool:
    """Whether the backbone is loaded in 4-bit NF4 (QLoRA): ``nf4``, or ``auto`` on CUDA (without ``fsdp``)."""
    if config.quantize == "nf4" and device.type != "cuda":
        raise UsageError("--quantize nf4 needs CUDA (bitsandbytes); use --quantize none on the CPU")
    return config.quantize == "nf4" or (config.quantize == "auto" and device.type == "cuda" and not config.fsdp)


def load_training_backbone(config: TrainConfig, device: torch.device, dtype: torch.dtype):
    """Load the backbone and tokenizer for training (4-bit NF4 for QLoRA, else ``dtype``), eager attention.

    Returns:
        ``(model, tokenizer)``.
    """

    if not wants_nf4(config, device):
        return load_backbone(config.model, dtype=dtype, device=device, attn_implementation="eager")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as err:
        raise UsageError("QLoRA needs bitsandbytes: pip install 'sst-interp[cuda]', or pass --quantize none") from err

    source = str(ensure_default_backbone()) if config.model == DEFAULT_MODEL else config.model
    quantization = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_compute_dtype=dtype,
        bnb_4bit_use_double_quant=True,
    )
    model = AutoModelForCausalLM.from_pretrained(
        source, quantization_config=quantization, dtype=dtype, attn_implementation="eager", device_map={"": device}
    )
    return model, AutoTokenizer.from_pretrained(source)


# ------------------------------------------------------------------------------------------------ building
def build_train_model(backbone: PreTrainedModel, config: TrainConfig) -> TrainModel:
    """Convert ``backbone`` (in place) into the model trained by ``config``.

    SST: the backbone becomes an SST first, then gets LoRA adapters; the SST parameters are re-enabled after peft
    froze them. Baseline: LoRA adapters only.
    """

    sst = None if config.baseline else SSTModel.from_backbone(backbone, SSTConfig(**config.sst_config_dict()))
    names = {name.rsplit(".", 1)[-1] for name, module in backbone.named_modules()}
    missing = [target for target in config.lora_targets if target not in names]
    if missing:
        raise UsageError(f"LoRA targets {missing} are not modules of this backbone; pass --lora-targets with names "
                         f"such as q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, lm_head")
    lora = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=list(config.lora_targets),
        bias="none",
        task_type="CAUSAL_LM",
    )
    with quiet_tied_adapter_warning():
        peft_model = get_peft_model(backbone, lora)
    if sst is not None:
        for param in sst.state_parameters():
            param.requires_grad_(True)
        # a plain attribute, not a submodule: save_checkpoint saves the adapter from it
        object.__setattr__(sst, "peft_model", peft_model)
    tie_head_adapter_to_embeddings(backbone)
    model = TrainModel(backbone, peft_model, sst)
    _check_trainable(model)
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(model, offload=config.offload_checkpoints)
    return model


def _check_trainable(model: TrainModel) -> None:
    allowed = {id(p) for p in model.lora_parameters()} | {id(p) for p in model.sst_parameters()}
    stray = [name for name, p in model.backbone.named_parameters() if p.requires_grad and id(p) not in allowed]
    if stray:
        raise RuntimeError(f"unexpected trainable parameters besides LoRA and SST: {stray[:5]}")
    if not model.lora_parameters():
        raise UsageError("no LoRA parameters were created; check --lora-targets")


def tie_head_adapter_to_embeddings(backbone: PreTrainedModel) -> torch.utils.hooks.RemovableHandle | None:
    """When the LM head shares its weight with the input embedding, apply the head's LoRA update there too.

    The embedding output becomes ``(W + s * B @ A)[ids] * embed_scale`` (Gemma scales embeddings by sqrt(d)), the
    embedding of the merged weight. Returns the hook handle, or ``None`` when the weights are not tied or the head
    has no adapter.
    """
    head = backbone.get_output_embeddings()
    embedding = backbone.get_input_embeddings()
    base = getattr(head, "base_layer", None)
    if base is None or not hasattr(head, "lora_A") or base.weight is not embedding.weight:
        return None

    def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        if getattr(head, "merged", False) or getattr(head, "disable_adapters", False):
            return output
        ids = args[0]
        delta = None
        for name in head.active_adapters:
            if name not in head.lora_A:
                continue
            a, b = head.lora_A[name].weight, head.lora_B[name].weight  # [r, d], [V, r]
            part = F.embedding(ids, b) @ a * head.scaling[name]
            delta = part if delta is None else delta + part
        if delta is None:
            return output
        scale = getattr(module, "embed_scale", None)
        if scale is not None:
            delta = delta * scale.to(delta.dtype)
        return output + delta.to(output.dtype)

    return embedding.register_forward_hook(hook)


def sst_checkpoint_context(sst: SSTModel) -> Callable[[], tuple]:
    """A ``context_fn`` for :func:`torch.utils.checkpoint.checkpoint` that replays each layer's SST context.

    Called when a layer is checkpointed in the forward pass, it snapshots the shared state-stream context (mode,
    given states, carried states); the recomputation in the backward pass runs under that snapshot (capturing off),
    then restores whatever context is current.
    """
    ctx = sst.context

    def context_fn() -> tuple:
        snapshot = (ctx.mode, dict(ctx.given), dict(ctx.carry), ctx.capture_kind)

        @contextlib.contextmanager
        def recompute() -> Iterator[None]:
            saved = (ctx.mode, ctx.given, ctx.carry, ctx.capture, ctx.capture_kind)
            ctx.mode, ctx.given, ctx.carry, ctx.capture_kind = snapshot[0], snapshot[1], dict(snapshot[2]), snapshot[3]
            ctx.capture = None
            try:
                yield
            finally:
                ctx.mode, ctx.given, ctx.carry, ctx.capture, ctx.capture_kind = saved

        return contextlib.nullcontext(), recompute()

    return context_fn


def enable_gradient_checkpointing(model: TrainModel, offload: bool = False) -> None:
    """Checkpoint every decoder layer (non-reentrant), replaying the SST context on recomputation."""
    kwargs: dict = {"use_reentrant": False}
    if model.sst is not None:
        kwargs["context_fn"] = sst_checkpoint_context(model.sst)
    enable = getattr(model.backbone, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs=kwargs, offload=offload)
    else:  # transformers releases before the rename
        model.backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
