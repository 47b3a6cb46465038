"""Saving and restoring trained models and the training state (resume), without pickle.

A run folder holds:

- ``best/``: the checkpoint with the lowest validation loss (the final one when there is no validation data). For
  the SST it is an SST checkpoint (:func:`sst_interp.model.checkpoint.save_checkpoint`: ``sst_config.json``,
  ``sst_state.safetensors``, ``adapter/``) that ``load_checkpoint`` and the recorder's ``--checkpoint`` load; for
  the baseline it is ``adapter/`` plus ``baseline.json`` (load it with
  :func:`sst_interp.model.baseline_checkpoint.load_baseline_checkpoint`).
- ``last/``: the latest checkpoint plus ``trainer_state.json`` (step, data position, early-stopping state, scheduler)
  and ``optimizer.safetensors`` (AdamW moments and the random generator states), for resuming.

Folders are written under a temporary name and renamed into place, so an interrupted save never leaves a partial
``last/`` or ``best/``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from peft import set_peft_model_state_dict
from safetensors.torch import load_file, save_file

from sst_interp.kernels.errors import UsageError
from sst_interp.model.baseline_checkpoint import write_baseline_meta
from sst_interp.model.checkpoint import ADAPTER_DIR, STATE_FILE, apply_state, save_checkpoint
from sst_interp.train.modeling import TrainModel

TRAINER_STATE = "trainer_state.json"
OPTIMIZER_STATE = "optimizer.safetensors"


def save_model(model: TrainModel, folder: Path, backbone_id: str, extra: dict[str, Any]) -> None:
    """Write the trained weights to ``folder`` (an SST checkpoint, or the baseline's adapter + ``baseline.json``)."""
    folder.mkdir(parents=True, exist_ok=True)
    # The adapter only: peft would otherwise also save the whole (frozen, tied) embedding matrix because lm_head is
    # an adapter target (671 MB for Gemma 3 270M).
    model.peft_model.save_pretrained(str(folder / ADAPTER_DIR), save_embedding_layers=False)
    if model.sst is not None:
        save_checkpoint(model.sst, folder, backbone_id=backbone_id, extra=extra, save_adapter=False)
        return
    write_baseline_meta(folder, backbone_id, extra)


def replace_folder(target: Path, write) -> None:  # noqa: ANN001 - write: Callable[[Path], None]
    """Call ``write(tmp)`` on a fresh temporary sibling folder, then move it to ``target`` (replacing it)."""
    tmp = target.with_name(f".tmp-{target.name}")
    old = target.with_name(f".old-{target.name}")
    for stale in (tmp, old):
        if stale.exists():
            shutil.rmtree(stale)
    tmp.mkdir(parents=True)
    write(tmp)
    if target.exists():
        target.rename(old)
    tmp.rename(target)
    if old.exists():
        shutil.rmtree(old)


def existing_folder(target: Path) -> Path | None:
    """``target`` if it exists, else the previous copy an interrupted :func:`replace_folder` left, else ``None``."""
    if target.is_dir():
        return target
    old = target.with_name(f".old-{target.name}")
    return old if old.is_dir() else None


def rng_tensors() -> dict[str, torch.Tensor]:
    """The random generator states (CPU, and CUDA when present) as uint8 tensors."""
    out = {"rng.cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for index, value in enumerate(torch.cuda.get_rng_state_all()):
            out[f"rng.cuda.{index}"] = value
    return out


def restore_rng(tensors: dict[str, torch.Tensor]) -> None:
    """Restore the generator states saved by :func:`rng_tensors`."""
    torch.set_rng_state(tensors["rng.cpu"])
    cuda = sorted(k for k in tensors if k.startswith("rng.cuda."))
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([tensors[k] for k in cuda])


def save_training_state(folder: Path, optimizer_tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
    """Write ``optimizer.safetensors`` (optimiser tensors + RNG) and ``trainer_state.json`` into ``folder``."""
    save_file({**optimizer_tensors, **rng_tensors()}, str(folder / OPTIMIZER_STATE))
    (folder / TRAINER_STATE).write_text(json.dumps(state, indent=2))


def load_training_state(folder: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Read what :func:`save_training_state` wrote: ``(tensors, state)``."""
    missing = [name for name in (TRAINER_STATE, OPTIMIZER_STATE) if not (folder / name).is_file()]
    if missing:
        raise UsageError(f"{folder} cannot be resumed from: missing {', '.join(missing)}; start a new --out")
    return load_file(str(folder / OPTIMIZER_STATE)), json.loads((folder / TRAINER_STATE).read_text())


def restore_weights(model: TrainModel, folder: Path) -> None:
    """Load the adapter (and SST) weights of a saved checkpoint into the live training model."""

    adapter = folder / ADAPTER_DIR / "adapter_model.safetensors"
    if not adapter.is_file():
        raise UsageError(f"{folder} has no adapter weights ({adapter}); start a new --out")
    result = set_peft_model_state_dict(model.peft_model, load_file(str(adapter)))
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise UsageError(f"{adapter} does not fit this model (unexpected keys {unexpected[:3]}); start a new --out")
    if model.sst is not None:
        apply_state(model.sst, load_file(str(folder / STATE_FILE)), source=str(folder))
