"""Training configuration (paper app:training_setup, tab:hyperparameters).

Every default is the paper's value from ``tab:hyperparameters`` unless its line says otherwise. Every field is a CLI
flag of ``python -m sst_interp.train`` (``--lr-sst`` sets ``lr_sst``, and so on).
"""

from __future__ import annotations

import json
import typing
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from sst_interp.kernels.fields import arg
from sst_interp.codeact.format import GEMMA3_ACTION_IDS
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.paper import A_MAX, A_MIN, THETA_INIT
from sst_interp.model.device_flags import device_arg, dtype_arg

#: The paper's LoRA targets: attention QKV+O, MLP {gate, up, down}, lm_head (tab:hyperparameters).
PAPER_LORA_TARGETS: tuple[str, ...] = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
    "lm_head",
)
#: The custom CodeACT action tokens and the unused Gemma 3 vocabulary ids they map to (app:dataset).
PAPER_ACTION_TOKENS: dict[str, int] = dict(GEMMA3_ACTION_IDS)

QUANTIZE_CHOICES: tuple[str, ...] = ("auto", "nf4", "none")


#: What ``train --dtype`` accepts (training also runs float16 and float64, which recording does not store).
TrainDtype = Literal["auto", "float32", "bfloat16", "float16", "float64"]
TRAIN_DTYPES: tuple[str, ...] = typing.get_args(TrainDtype)
#: What ``train --device`` accepts (a process of several takes its GPU from LOCAL_RANK: ``cuda`` only).
TrainDevice = Literal["auto", "cpu", "cuda"]
TRAIN_DEVICES: tuple[str, ...] = typing.get_args(TrainDevice)

@dataclass
class TrainConfig:
    """One training run: the SST (two-pass) or, with ``baseline``, the matched one-pass LoRA baseline.

    Each field's documentation is its ``help`` (``python -m sst_interp.train --help`` lists them all).
    """

    train_data: str | None = arg(None, help="JSONL file of training examples (see sst_interp.train.data for the row "
                                            "formats)")
    val_data: str | None = arg(None, help="JSONL file of validation examples; none disables validation and early "
                                          "stopping")
    out: str = arg("runs/train", help="output folder: logs, best/ and last/ checkpoints, summary.json")
    model: str = arg("default", help="backbone: default (Gemma 3 270M), a local Hugging Face folder, a .gguf file "
                                     "or a hub id")
    baseline: bool = arg(False, help="train the matched baseline (sec:baseline_ft): same data, order and optimiser; "
                                     "no SST, one pass")
    state_scale: str = arg("unit", help="SST state scale: unit (the paper) or hidden (see sst_interp.model.SSTConfig)")
    theta_init: float = arg(THETA_INIT, help="initial blend logit (paper: -1.8)")
    a_min: float = arg(A_MIN, help="lower bound of alpha (paper: 0.015)")
    a_max: float = arg(A_MAX, help="upper bound of alpha (paper: 0.10)")
    update: str = arg("direct", help="SST state update: direct (the paper) or ema_linked")
    sst_layers: list[int] | None = arg(None, help="decoder layers with a state stream (default: all, the paper)")
    text_field: str = arg("text", help="JSON key that holds a pre-formatted chat string (app:dataset_format); the "
                                       "paper does not name the key, text is our choice")
    model_turn_start: str = arg("<start_of_turn>model", help="marker that opens a model turn; tokens after it are "
                                                             "labelled (app:dataset_format)")
    turn_end: str = arg("<end_of_turn>", help="marker that closes a turn; the closing marker of a model turn is "
                                              "labelled too")
    action_tokens: dict[str, int] = arg(default_factory=lambda: dict(PAPER_ACTION_TOKENS), metavar="TOKEN=ID,...",
                                        help="custom token strings and the reserved vocabulary ids they map to "
                                             "(paper: <execute> -> 262140, </execute> -> 262141)")
    max_seq_len: int = arg(8192, help="longest training sequence in tokens (paper: 8192); longer examples are cut "
                                      "on the right")
    pack: bool = arg(False, help="concatenate consecutive examples into sequences of at most max_seq_len tokens; "
                                 "each document starts from a zero state and attends only to itself (off by "
                                 "default: the paper does not pack)")
    lora_r: int = arg(64, help="LoRA rank (paper: 64)")
    lora_alpha: float = arg(64.0, help="LoRA scaling alpha (paper: 64)")
    lora_dropout: float = arg(0.05, help="LoRA dropout (paper: 0.05)")
    lora_targets: list[str] = arg(default_factory=lambda: list(PAPER_LORA_TARGETS),
                                  help="module names that get LoRA adapters (paper: attention QKV+O, MLP "
                                       "gate/up/down, lm_head)")
    quantize: str = arg("auto", help="auto (NF4 QLoRA when CUDA is present, plain LoRA otherwise), nf4 or none")
    lr_lora: float = arg(1e-4, help="peak learning rate of the LoRA group (paper: 1e-4)")
    lr_sst: float = arg(1e-2, help="constant learning rate of the SST group (paper: 1e-2)")
    warmup_steps: int = arg(10, help="linear warmup steps of the LoRA group before cosine decay (paper: 10)")
    weight_decay: float = arg(0.0, help="AdamW weight decay of both groups (paper: 0)")
    adam_beta1: float = arg(0.9, help="AdamW beta1 (paper: 0.9)")
    adam_beta2: float = arg(0.999, help="AdamW beta2 (paper: 0.999)")
    adam_eps: float = arg(1e-8, help="AdamW epsilon (paper: 1e-8)")
    max_grad_norm: float = arg(1.0, help="gradient clipping norm over all trainable parameters (paper: 1.0)")
    micro_batch_size: int = arg(1, help="sequences per forward (paper: 1)")
    grad_accum: int = arg(16, help="micro-batches per optimiser step (paper: 16)")
    max_steps: int = arg(2000, help="optimiser steps at most (paper: 2000); also the length of the cosine schedule")
    eval_every: int = arg(10, help="validate (and save last/) every this many optimiser steps; the paper does not "
                                   "state its interval, 10 is our choice (its best steps, 410 and 280, are both "
                                   "multiples of 10)")
    patience: int = arg(4, help="stop after this many validations without a new best validation loss (paper: 4)")
    gradient_checkpointing: bool = arg(True, help="recompute layer activations in the backward pass (paper: on)")
    offload_checkpoints: bool = arg(False, help="keep checkpointed activations in host memory (the paper's "
                                                "\"offloaded gradient checkpointing\"); only useful on an "
                                                "accelerator")
    fsdp: bool = arg(False, help="under several processes (torchrun, accelerate launch --multi_gpu), shard the frozen "
                                 "backbone weights over them with torch's FSDP2 (one unit per decoder layer, one for "
                                 "the embeddings and final norm) instead of holding a full copy in each; the LoRA and "
                                 "SST parameters stay replicated (SST in float32), so the numbers equal those without "
                                 "it. Loads the backbone on the CPU first; not with --quantize nf4")
    ce_chunk_size: int = arg(1024, help="labelled positions per chunk of the chunked cross-entropy (the LM head's "
                                        "logits of one chunk are the only ones alive at a time)")
    dtype: TrainDtype = dtype_arg()
    device: TrainDevice = device_arg(typed=True)
    seed: int = arg(0, help="seed of torch's generator (LoRA initialisation and dropout)")
    threads: int | None = arg(None, help="torch intra-op threads for the command line run (default: torch's; on a "
                                         "shared CPU, 1 avoids the stalls of oversubscribed threads)")
    preset: str = arg("paper", help="name of the preset the config came from (paper, demo or codeact-demo), recorded in the "
                                    "outputs")

    def __post_init__(self) -> None:
        positive = ("max_seq_len", "lora_r", "micro_batch_size", "grad_accum", "max_steps", "eval_every",
                    "patience", "ce_chunk_size")
        for name in positive:
            if int(getattr(self, name)) < 1:
                raise UsageError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("lr_lora", "lr_sst", "max_grad_norm", "lora_alpha", "adam_eps"):
            if not float(getattr(self, name)) > 0:
                raise UsageError(f"{name} must be positive, got {getattr(self, name)}")
        if self.warmup_steps < 0 or self.weight_decay < 0:
            raise UsageError("warmup_steps and weight_decay must not be negative")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise UsageError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")
        for name in ("adam_beta1", "adam_beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise UsageError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.quantize not in QUANTIZE_CHOICES:
            raise UsageError(f"unknown quantize mode {self.quantize!r}; use one of {', '.join(QUANTIZE_CHOICES)}")
        if self.fsdp and self.quantize == "nf4":
            raise UsageError("--fsdp shards plain (bfloat16/float32) weights, not 4-bit NF4 ones; pass --quantize none "
                             "(or auto) with --fsdp, or drop --fsdp to train QLoRA")
        if self.dtype not in TRAIN_DTYPES:
            raise UsageError(f"unknown dtype {self.dtype!r}; use one of {', '.join(TRAIN_DTYPES)}")
        if self.device not in TRAIN_DEVICES:
            raise UsageError(f"unknown device {self.device!r}; use one of {', '.join(TRAIN_DEVICES)}")
        if not self.model_turn_start or not self.turn_end:
            raise UsageError("model_turn_start and turn_end must be non-empty strings")
        if not self.lora_targets:
            raise UsageError("lora_targets must name at least one module (e.g. q_proj)")
        for token, token_id in self.action_tokens.items():
            if not token or int(token_id) < 0:
                raise UsageError(f"bad action token mapping {token!r} -> {token_id}; use TOKEN=ID with ID >= 0")
        self.action_tokens = {str(k): int(v) for k, v in self.action_tokens.items()}
        if len(set(self.action_tokens.values())) != len(self.action_tokens):
            raise UsageError(f"--action-tokens {self.action_tokens}: each action token needs its own id")
        if self.state_scale not in ("unit", "hidden"):
            raise UsageError(f"unknown state_scale {self.state_scale!r}; use 'unit' or 'hidden'")
        self.lora_targets = [str(t) for t in self.lora_targets]
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"threads must be at least 1, got {self.threads}")
        if self.sst_layers is not None:
            self.sst_layers = sorted({int(layer) for layer in self.sst_layers})

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (written to ``train_config.json``)."""
        return asdict(self)

    def to_json(self) -> str:
        """The config as indented JSON."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Inverse of :meth:`to_dict`; unknown keys are a :class:`UsageError`."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UsageError(f"unknown training config keys {unknown}; known keys are {sorted(known)}")
        return cls(**data)

    def sst_config_dict(self) -> dict[str, Any]:
        """The keyword arguments of :class:`sst_interp.model.SSTConfig` this run uses."""
        return {
            "a_min": self.a_min,
            "a_max": self.a_max,
            "theta_init": self.theta_init,
            "update": self.update,
            "state_scale": self.state_scale,
            "layers": self.sst_layers,
        }


@dataclass(frozen=True)
class TrainPresets:
    """The two presets a training run may start from instead of the paper's defaults (the ``train`` command's
    ``--demo`` and ``--codeact-demo``; in Python, call :func:`demo_config` or :func:`codeact_demo_config`). They
    choose which :class:`TrainConfig` the given flags are laid over, so they are not fields of it."""

    demo: bool = arg(False, help="demo preset: a small SST on the default backbone, CPU, a few minutes, procedural "
                                 "data (changes some of the other flags' defaults; see "
                                 "sst_interp.train.config.demo_config)")
    codeact_demo: bool = arg(False, help="the recipe of the shipped demo-codeact checkpoint (with --baseline: of "
                                         "demo-codeact-baseline) on CodeACT traces from python -m "
                                         "sst_interp.train.codeact_data; needs --train-data and --val-data (see "
                                         "sst_interp.train.config.codeact_demo_config)")


#: Fields that may change between a run and its resumption (everything else must match).
RESUMABLE_FIELDS: frozenset[str] = frozenset({"max_steps", "eval_every", "patience", "out", "device", "threads",
                                              "offload_checkpoints", "gradient_checkpointing", "ce_chunk_size",
                                              "fsdp"})


def codeact_demo_config(out: str = "runs/train-codeact-demo", **overrides: Any) -> TrainConfig:
    """The ``--codeact-demo`` preset: the recipe of the shipped ``demo-codeact`` checkpoint (and, with
    ``--baseline``, of ``demo-codeact-baseline``), on traces from ``python -m sst_interp.train.codeact_data``.

    Paper settings where they fit a 2-core CPU: unit state scale, two-pass training, SST learning rate 1e-2, AdamW
    and clipping as the paper, the action tokens at their reserved ids, checkpoint selection on validation loss.
    Departures, each for time or size: LoRA rank 4 (alpha 4) on the paper's targets, so that the adapter stays
    under 10 MB (the tied 262k-row LM head alone costs r x (V + d) parameters). The head must stay a target: the
    action tokens are unused vocabulary rows, and with adapters on attention and MLP only, 40 steps taught the
    code but never the ``<execute>`` token (its logit stayed below ordinary words). LoRA learning rate 1e-3 with
    5 warmup steps (at 1e-4, 360 steps barely move the adapter); one packed sequence of at most 512 tokens per step
    (about 2 traces) instead of 16 unpacked sequences of 8,192; 360 steps (about 740 of the 6,295 training traces,
    once each); validation every 60 steps; gradient checkpointing off.
    """
    settings: dict[str, Any] = {
        "out": out,
        "preset": "codeact-demo",
        "state_scale": "unit",
        "lora_r": 4,
        "lora_alpha": 4.0,
        "lr_lora": 1e-3,
        "warmup_steps": 5,
        "grad_accum": 1,
        "max_steps": 360,
        "eval_every": 60,
        "max_seq_len": 512,
        "pack": True,
        "gradient_checkpointing": False,
        "threads": 2,
        "seed": 0,
    }
    settings.update(overrides)
    return TrainConfig(**settings)


def demo_config(out: str = "runs/train-demo", **overrides: Any) -> TrainConfig:
    """The ``--demo`` preset: a small SST on the default backbone that trains on a 2-core CPU in a few minutes.

    Departures from the paper, all for speed on a CPU (a two-pass step costs about 0.03 s of CPU per token on Gemma
    3 270M there): LoRA rank 8 (alpha 8) instead of 64; 2 micro-batches per step instead of 16, each a packed
    sequence of at most 96 tokens (about 8 demo documents); 16 steps with 2 warmup steps; a LoRA learning rate of
    1e-3 instead of 1e-4 so that 16 steps move the adapter visibly; validation every 4 steps; gradient checkpointing
    off (the model fits in memory); one torch thread (on a shared 2-core machine more threads stall each other and
    ran 5x slower; pass ``--threads N`` on a machine of your own); ``state_scale="hidden"`` (an untrained unit-scale
    SST on Gemma 3 270M is nearly inert; see the README's Concepts); and no action-token mapping (the demo text has no
    ``<execute>`` tokens). The SST learning rate (1e-2), AdamW settings, clipping, LoRA dropout and targets are the
    paper's.
    """
    settings: dict[str, Any] = {
        "out": out,
        "preset": "demo",
        "state_scale": "hidden",
        "lora_r": 8,
        "lora_alpha": 8.0,
        "lr_lora": 1e-3,
        "grad_accum": 2,
        "max_steps": 16,
        "warmup_steps": 2,
        "eval_every": 4,
        "max_seq_len": 96,
        "pack": True,
        "gradient_checkpointing": False,
        "threads": 1,
        "action_tokens": {},
        "quantize": "none",
        "device": "cpu",
    }
    settings.update(overrides)
    return TrainConfig(**settings)
