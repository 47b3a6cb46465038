"""The training loop: two-pass SST steps or one-pass baseline steps, validation, early stopping, resume.

One optimiser step = ``grad_accum`` micro-batches taken in the deterministic data order. The loss of a step is the
token-weighted mean next-token cross-entropy over all labelled tokens of its micro-batches (each micro-batch's summed
loss is divided by the step's total token count before its backward pass). Gradients are clipped to
``max_grad_norm`` over all trainable parameters, then AdamW steps and the schedules advance.

Validation (every ``eval_every`` steps and at the last step) is the token-weighted mean loss over the whole
validation file, in eval mode (no dropout), with the same forward as training. Early stopping ends the run after
``patience`` validations without a new best; ``best/`` always holds the best checkpoint.

Under ``torchrun`` (or ``accelerate launch --multi_gpu``) N processes train data-parallel: one optimiser step reads
``grad_accum * N`` micro-batches, the global batch of a single process with ``grad_accum * N``, split over the ranks,
with gradients, losses and validation summed over them (:mod:`sst_interp.train.distributed`). Only rank 0 writes.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.progress import progress as progress_bar
from sst_interp.model.backbone import backbone_identity
from sst_interp.train import distributed
from sst_interp.train.config import RESUMABLE_FIELDS, TrainConfig
from sst_interp.train.data import (
    Batch,
    DataOrder,
    check_rows,
    data_format_from_config,
    pack_examples,
    read_jsonl,
    tokenize_row,
)
from sst_interp.train.logs import TrainLogs
from sst_interp.train.loss import chunked_cross_entropy
from sst_interp.train.modeling import (
    TrainModel,
    build_train_model,
    load_training_backbone,
    training_dtype,
)
from sst_interp.train.optim import (
    build_optimizer,
    build_scheduler,
    group_lrs,
    optimizer_state_from_tensors,
    optimizer_state_to_tensors,
)
from sst_interp.train.preflight import check_launch
from sst_interp.train.state import (
    existing_folder,
    load_training_state,
    replace_folder,
    restore_rng,
    restore_weights,
    save_model,
    save_training_state,
)

RUN_META = "train_config.json"
SUMMARY = "summary.json"


class TrainObserver:
    """Receives training events (tests and tools subclass it; the defaults do nothing)."""

    def on_micro_batch(self, step: int, batch: Batch) -> None:
        """Before micro-batch ``batch`` of optimiser step ``step`` (1-based) runs."""

    def on_step_end(self, step: int, row: dict[str, Any]) -> None:
        """After optimiser step ``step`` finished (logged, validated and saved as scheduled)."""


@dataclass
class TrainResult:
    """What a run produced.

    Args:
        out: the run folder.
        best_checkpoint: folder of the best (or, without validation, the final) checkpoint.
        steps: optimiser steps done.
        best_step: step of the best validation loss (``None`` without validation).
        best_val_loss: the best validation loss (``None`` without validation).
        stop_reason: ``max_steps`` or ``early_stopping``.
        log: ``train_log.csv`` as a DataFrame.
    """

    out: Path
    best_checkpoint: Path
    steps: int
    best_step: int | None
    best_val_loss: float | None
    stop_reason: str
    log: pd.DataFrame


def micro_batch_loss(model: TrainModel, batch: Batch, chunk_size: int) -> tuple[torch.Tensor, int]:
    """Summed loss over the labelled tokens of one micro-batch and their count (SST: two passes; baseline: one)."""
    batch = batch.to(model.device)
    hidden = model.hidden(batch)
    return chunked_cross_entropy(hidden, batch.labels, model.head, chunk_size)


def evaluate_sums(
    model: TrainModel, order: DataOrder, chunk_size: int, positions: Sequence[int] | None = None
) -> tuple[float, int]:
    """Summed loss and labelled-token count over the micro-batches ``positions`` of ``order`` (default: all of them),
    in eval mode, without gradients."""
    was_training = model.backbone.training
    model.eval()
    total, count = 0.0, 0
    try:
        with torch.no_grad():
            for position in range(order.num_micro_batches) if positions is None else positions:
                loss, n = micro_batch_loss(model, order.batch(position), chunk_size)
                total += float(loss)
                count += n
    finally:
        if was_training:
            model.train()
    return total, count


def evaluate(model: TrainModel, order: DataOrder, chunk_size: int) -> float:
    """Token-weighted mean loss over every sequence of ``order`` (eval mode, no gradients)."""
    total, count = evaluate_sums(model, order, chunk_size)
    return total / max(count, 1)


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class Trainer:
    """Runs one training configuration end to end (see the module docstring).

    Args:
        config: the :class:`TrainConfig`.
        backbone: a loaded causal LM to train (tests pass tiny models); ``None`` loads ``config.model``.
        tokenizer: its tokenizer (required with ``backbone``).
        backbone_id: identity recorded in checkpoints (defaults to the model name).
        observer: a :class:`TrainObserver`.
        progress: show a progress bar, plain lines off a terminal (on rank 0 only, under several processes).
        on_validated: called once the launch, data and ``--out`` are checked, before the model loads (the CLI
            prints its banner there, so that an input error is the only line a refused command prints).

    Under a multi-process launch (``WORLD_SIZE`` > 1 in the environment) the trainer joins the process group itself;
    :func:`sst_interp.train.distributed.leave` leaves it.
    """

    def __init__(
        self,
        config: TrainConfig,
        backbone=None,
        tokenizer=None,
        backbone_id: str | None = None,
        observer: TrainObserver | None = None,
        progress: bool = True,
        on_validated: Callable[[], None] | None = None,
    ) -> None:
        if config.train_data is None:
            raise UsageError("no training data: pass --train-data FILE.jsonl (or --demo)")
        self.dp = distributed.from_environment()
        self.device = check_launch(config, self.dp, model=backbone is None)
        self.config = config
        self.out = Path(config.out)
        self.observer = observer or TrainObserver()
        self.progress = progress
        fmt = data_format_from_config(config)
        train_rows = read_jsonl(config.train_data)  # fail on bad data before loading a model
        val_rows = read_jsonl(config.val_data) if config.val_data else None
        check_rows(train_rows, fmt, str(config.train_data))
        if val_rows is not None:
            check_rows(val_rows, fmt, str(config.val_data))
        self.meta = self._run_meta()
        self._check_out_folder(write=False)  # a mismatched run folder is refused before the model loads
        if on_validated is not None:
            on_validated()
        distributed.join(self.dp, self.device)
        self.dp.barrier()  # every rank has read --out before rank 0 rewrites its meta below
        if backbone is None:
            # under --fsdp the full backbone is only ever in host memory: it goes to the device shard by shard
            where = torch.device("cpu") if config.fsdp else self.device
            backbone, tokenizer = load_training_backbone(config, where, training_dtype(config, self.device))
        elif tokenizer is None:
            raise ValueError("pass the tokenizer together with the backbone")

        self.backbone_id = backbone_id or backbone_identity(config.model)
        vocab = backbone.get_input_embeddings().weight.shape[0]
        bad = {token: i for token, i in config.action_tokens.items() if i >= vocab}
        if bad:
            raise UsageError(f"action token ids {bad} are outside the model's vocabulary of {vocab}; map them to "
                             f"reserved ids below {vocab} with --action-tokens")
        # only now, with the model loaded, is anything written into --out (by rank 0)
        self.dp.run_on_main(lambda: self._check_out_folder(write=True))
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        train = [tokenize_row(r, tokenizer, fmt, i, str(config.train_data)) for i, r in enumerate(train_rows)]
        self.num_truncated = sum(example.truncated for example in train)
        self.train_order = DataOrder(pack_examples(train, config.max_seq_len, config.pack), config.micro_batch_size, pad)
        self.val_order = None
        if val_rows is not None:
            val = [tokenize_row(r, tokenizer, fmt, i, str(config.val_data)) for i, r in enumerate(val_rows)]
            self.val_order = DataOrder(pack_examples(val, config.max_seq_len, config.pack), config.micro_batch_size, pad)
        self.num_train, self.num_val = len(train_rows), len(val_rows or [])
        torch.manual_seed(config.seed)
        self.model = build_train_model(backbone, config)
        self.sharding: str | None = None  # what --fsdp sharded, in words
        if config.fsdp:
            self.sharding = distributed.shard_frozen_backbone(self.model, self.device)
        if self.dp.enabled:
            self.dp.broadcast_parameters(self._trainable())  # identical replicas, whatever each rank's seeding did
            if not self.dp.is_main:
                torch.manual_seed(distributed.rank_seed(config.seed, self.dp.rank))  # its own dropout stream
        self.optimizer = build_optimizer(self.model.lora_parameters(), self.model.sst_parameters(), config)
        self.scheduler = build_scheduler(self.optimizer, config)
        self.logs = TrainLogs(self.out)
        self.step = 0
        self.data_position = 0
        self.best_val: float | None = None
        self.best_step: int | None = None
        self.bad_evals = 0
        self.elapsed = 0.0
        self.stop_reason: str | None = None
        self._saved_step = -1
        self.resumed = self._maybe_resume()

    # -------------------------------------------------------------------------------------------- run folder
    def _run_meta(self) -> dict[str, Any]:
        config = self.config
        return {
            "config": config.to_dict(),
            "train_sha256": file_sha256(config.train_data),
            "val_sha256": file_sha256(config.val_data) if config.val_data else None,
            "world_size": self.dp.world_size,
        }

    def _check_out_folder(self, write: bool) -> None:
        """Refuse an --out holding another training run; with ``write``, record this run's meta there."""
        path = self.out / RUN_META
        if not path.is_file() or existing_folder(self.out / "last") is None:
            # nothing to resume (a new folder, or a run that failed before its first save): start afresh
            if write:
                self.out.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(self.meta, indent=2, sort_keys=True))
            return
        previous = json.loads(path.read_text())
        old_cfg = {k: v for k, v in previous.get("config", {}).items() if k not in RESUMABLE_FIELDS}
        new_cfg = {k: v for k, v in self.meta["config"].items() if k not in RESUMABLE_FIELDS}
        changed = sorted(k for k in set(old_cfg) | set(new_cfg) if old_cfg.get(k) != new_cfg.get(k))
        for key in ("train_sha256", "val_sha256"):
            if previous.get(key) != self.meta[key]:
                changed.append(key.replace("_sha256", " data"))
        if changed:
            raise UsageError(f"{self.out} holds another training run (differs in {', '.join(changed)}); "
                             f"pass a new --out, or the same settings to resume it")
        processes = int(previous.get("world_size", 1))
        if processes != self.dp.world_size:
            raise UsageError(f"{self.out} was trained by {processes} process(es), this is {self.dp.world_size}; resume "
                             f"it with {processes} (torchrun --nproc-per-node {processes}), or pass a new --out")
        if write:
            path.write_text(json.dumps(self.meta, indent=2, sort_keys=True))

    def _maybe_resume(self) -> bool:
        folder = existing_folder(self.out / "last")
        if folder is None:
            if self.dp.is_main:
                self.logs.truncate_after(-1)
                if self.model.sst is not None:
                    alphas = self.model.sst.alphas().cpu().numpy()
                    self.logs.log_alpha(alphas, list(self.model.sst.state_modules()), 0)
            return False
        tensors, state = load_training_state(folder)
        restore_weights(self.model, folder)
        optimizer_tensors = {k: v for k, v in tensors.items() if k.startswith("state.")}
        optimizer_state_from_tensors(self.optimizer, optimizer_tensors, state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        restore_rng(tensors)
        self.dp.restore_rng(tensors, self.device)
        self.step, self.data_position = int(state["step"]), int(state["data_position"])
        self.best_val, self.best_step = state["best_val_loss"], state["best_step"]
        self.bad_evals, self.elapsed = int(state["bad_evals"]), float(state["elapsed_s"])
        self.stop_reason = state.get("stop_reason")
        self._saved_step = self.step
        if self.dp.is_main:
            self.logs.truncate_after(self.step)
        return True

    def _trainable(self) -> list[torch.nn.Parameter]:
        return self.model.lora_parameters() + self.model.sst_parameters()

    # -------------------------------------------------------------------------------------------- steps
    def train_step(self) -> dict[str, Any]:
        """Run one optimiser step; returns its log row (without validation).

        Under N processes the step's window holds ``grad_accum * N`` micro-batches; this rank runs its share, the
        loss is normalised by the window's token count, and gradients and loss are summed over the ranks.
        """
        config, model, dp = self.config, self.model, self.dp
        step = self.step + 1
        window = range(self.data_position, self.data_position + config.grad_accum * dp.world_size)
        batches = [self.train_order.batch(p) for p in dp.share(window)]
        if dp.enabled:
            window_tokens = sum(self.train_order.num_label_tokens(p) for p in window)
        else:
            window_tokens = sum(b.num_label_tokens for b in batches)
        model.train()
        total = 0.0
        for batch in batches:
            self.observer.on_micro_batch(step, batch)
            loss, _ = micro_batch_loss(model, batch, config.ce_chunk_size)
            (loss / window_tokens).backward()
            total += float(loss.detach())
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        if dp.enabled:
            dp.sum_gradients(params)  # every rank now holds the gradient of the whole window
            total = dp.sum([total])[0]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
        lrs = group_lrs(self.optimizer)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step, self.data_position = step, self.data_position + len(window)
        return {
            "step": step,
            "train_loss": total / window_tokens,
            "val_loss": None,
            "lr_lora": lrs.get("lora"),
            "lr_sst": lrs.get("sst"),
            "grad_norm": float(grad_norm),
            "tokens": window_tokens,
            "epoch": self.train_order.epoch(self.data_position),
        }

    def validate(self) -> float | None:
        """Validation loss now (``None`` without validation data)."""
        if self.val_order is None:
            return None
        if not self.dp.enabled:
            return evaluate(self.model, self.val_order, self.config.ce_chunk_size)
        num = self.val_order.num_micro_batches
        positions = self.dp.share(range(num))
        total, count = evaluate_sums(self.model, self.val_order, self.config.ce_chunk_size, positions)
        if self.config.fsdp:
            # each forward gathers the sharded weights with every other rank: all must run as many forwards
            for _ in range(-(-num // self.dp.world_size) - len(positions)):
                evaluate_sums(self.model, self.val_order, self.config.ce_chunk_size, [0])  # result unused
        total, count = self.dp.sum([total, count])
        return total / max(count, 1)

    # -------------------------------------------------------------------------------------------- saving
    def _extra(self, val_loss: float | None) -> dict[str, Any]:
        return {"step": self.step, "val_loss": val_loss, "baseline": self.model.is_baseline,
                "preset": self.config.preset, "train_sha256": self.meta["train_sha256"],
                "action_tokens": dict(self.config.action_tokens)}

    def save_best(self, val_loss: float | None) -> None:
        """Write ``best/`` from the current weights (rank 0 writes, the others wait)."""
        self.dp.run_on_main(lambda: replace_folder(
            self.out / "best", lambda tmp: save_model(self.model, tmp, self.backbone_id, self._extra(val_loss))))

    def save_last(self) -> None:
        """Write ``last/``: weights, optimiser, scheduler, RNG, step, data position and early-stopping state.

        Under several processes: every rank's random state is saved too, and the replicas are checked to be equal.
        """
        self.dp.check_in_sync(self._trainable())
        rank_rng = self.dp.rng_tensors(self.device)
        self.dp.run_on_main(lambda: self._write_last(rank_rng))
        self._saved_step = self.step

    def _write_last(self, rank_rng: dict[str, torch.Tensor]) -> None:
        tensors, optimizer_meta = optimizer_state_to_tensors(self.optimizer)
        tensors.update(rank_rng)
        state = {
            "step": self.step,
            "data_position": self.data_position,
            "best_val_loss": self.best_val,
            "best_step": self.best_step,
            "bad_evals": self.bad_evals,
            "elapsed_s": self.elapsed,
            "stop_reason": self.stop_reason,
            "scheduler": self.scheduler.state_dict(),
            "optimizer": optimizer_meta,
        }

        def write(tmp: Path) -> None:
            save_model(self.model, tmp, self.backbone_id, self._extra(None))
            save_training_state(tmp, tensors, state)

        replace_folder(self.out / "last", write)

    # -------------------------------------------------------------------------------------------- run
    def run(self) -> TrainResult:
        """Train until ``max_steps`` or early stopping; returns the :class:`TrainResult`."""
        config = self.config
        bar = progress_bar(total=config.max_steps, initial=self.step, disable=not (self.progress and self.dp.is_main),
                   desc="train", unit="step")
        try:
            while self.step < config.max_steps and self.stop_reason is None:
                started = time.perf_counter()
                row = self.train_step()
                scheduled = self.step % config.eval_every == 0 or self.step == config.max_steps
                if scheduled:
                    row["val_loss"] = self._validate_and_track()
                self.elapsed += time.perf_counter() - started
                row["elapsed_s"] = round(self.elapsed, 3)
                if self.dp.is_main:
                    self._log(row)
                if scheduled or self.step == config.max_steps or self.stop_reason is not None:
                    self.save_last()
                bar.update(1)
                bar.set_postfix(loss=f"{row['train_loss']:.4f}",
                                val="-" if row["val_loss"] is None else f"{row['val_loss']:.4f}")
                self.observer.on_step_end(self.step, row)
        finally:
            bar.close()
        if self.stop_reason is None:
            self.stop_reason = "max_steps"
        if self.val_order is None:
            self.save_best(None)
        if self._saved_step != self.step:
            self.save_last()
        return self._finish()

    def _log(self, row: dict[str, Any]) -> None:
        self.logs.log_step(row)
        if self.model.sst is not None:
            alphas = self.model.sst.alphas().cpu().numpy()
            self.logs.log_alpha(alphas, list(self.model.sst.state_modules()), self.step)

    def _validate_and_track(self) -> float | None:
        val = self.validate()
        if val is None:
            return None
        if self.best_val is None or val < self.best_val:
            self.best_val, self.best_step, self.bad_evals = val, self.step, 0
            self.save_best(val)
        else:
            self.bad_evals += 1
            if self.bad_evals >= self.config.patience:
                self.stop_reason = "early_stopping"
        return val

    def _finish(self) -> TrainResult:
        summary = {
            "steps": self.step,
            "best_step": self.best_step,
            "best_val_loss": self.best_val,
            "stop_reason": self.stop_reason,
            "best_checkpoint": str(self.out / "best"),
            "baseline": self.model.is_baseline,
            "preset": self.config.preset,
            "train_examples": self.num_train,
            "val_examples": self.num_val,
            "truncated_train_examples": self.num_truncated,
            "elapsed_s": round(self.elapsed, 3),
            "backbone": self.backbone_id,
            "world_size": self.dp.world_size,
        }
        self.dp.run_on_main(lambda: (self.out / SUMMARY).write_text(json.dumps(summary, indent=2)))
        return TrainResult(self.out, self.out / "best", self.step, self.best_step, self.best_val,
                           self.stop_reason, self.logs.read_train())


def run_training(config: TrainConfig, **kwargs: Any) -> TrainResult:
    """Build a :class:`Trainer` for ``config`` (keyword arguments as for the trainer) and run it."""
    return Trainer(config, **kwargs).run()
