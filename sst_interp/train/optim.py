"""AdamW with two parameter groups and their schedules (paper app:training_setup, tab:hyperparameters).

- ``lora``: peak ``lr_lora`` (1e-4), linear warmup over ``warmup_steps`` (10) then cosine decay to 0 at
  ``max_steps``. The multiplier follows transformers' ``get_cosine_schedule_with_warmup`` (step 0 has lr 0).
- ``sst``: ``lr_sst`` (1e-2), constant; float32 parameters. Both groups: weight decay 0 (the paper), betas
  (0.9, 0.999), eps 1e-8.

The optimiser state is saved as safetensors (tensors) plus JSON (everything else), not pickle.
"""

from __future__ import annotations

import math
from functools import partial

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from sst_interp.kernels.errors import UsageError
from sst_interp.train.config import TrainConfig


def warmup_cosine(step: int, warmup_steps: int, max_steps: int) -> float:
    """LR multiplier at optimiser step ``step`` (0-based): ``step / warmup`` during warmup, then cosine to 0."""
    if step < warmup_steps:
        return float(step) / float(max(1, warmup_steps))
    progress = float(step - warmup_steps) / float(max(1, max_steps - warmup_steps))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def constant(step: int) -> float:
    """LR multiplier 1 at every step."""
    return 1.0


def build_optimizer(
    lora_params: list[nn.Parameter], sst_params: list[nn.Parameter], config: TrainConfig
) -> torch.optim.AdamW:
    """AdamW with the group ``lora`` and, when there are SST parameters, the group ``sst``.

    Raises:
        UsageError: an SST parameter that is not float32 (the paper trains them at full precision).
    """
    bad = [p.dtype for p in sst_params if p.dtype != torch.float32]
    if bad:
        raise UsageError(f"SST parameters must be float32, found {sorted(set(map(str, bad)))}")
    groups = [{"params": lora_params, "lr": config.lr_lora, "weight_decay": config.weight_decay, "name": "lora"}]
    if sst_params:
        groups.append({"params": sst_params, "lr": config.lr_sst, "weight_decay": config.weight_decay, "name": "sst"})
    return torch.optim.AdamW(groups, betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_eps)


def build_scheduler(optimizer: torch.optim.Optimizer, config: TrainConfig) -> LambdaLR:
    """Per-group schedules: warmup + cosine for ``lora``, constant for ``sst``."""
    schedules = {
        "lora": partial(warmup_cosine, warmup_steps=config.warmup_steps, max_steps=config.max_steps),
        "sst": constant,
    }
    return LambdaLR(optimizer, [schedules[group["name"]] for group in optimizer.param_groups])


def group_lrs(optimizer: torch.optim.Optimizer) -> dict[str, float]:
    """Current learning rate of each named group, e.g. ``{"lora": 1e-5, "sst": 1e-2}``."""
    return {group["name"]: float(group["lr"]) for group in optimizer.param_groups}


def optimizer_state_to_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """Split ``optimizer.state_dict()`` into tensors (for safetensors) and JSON-ready metadata.

    Returns:
        ``(tensors, meta)`` where tensors are keyed ``state.{param}.{name}`` and meta holds the param groups and,
        per parameter state, its non-tensor entries.
    """
    state = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict] = {}
    for param_id, entries in state["state"].items():
        for name, value in entries.items():
            if torch.is_tensor(value):
                tensors[f"state.{param_id}.{name}"] = value.detach().cpu().clone()
            else:
                scalars.setdefault(str(param_id), {})[name] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def optimizer_state_from_tensors(
    optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict
) -> None:
    """Inverse of :func:`optimizer_state_to_tensors`: load the saved state into ``optimizer``."""
    state: dict[int, dict] = {}
    for key, value in tensors.items():
        _, param_id, name = key.split(".", 2)
        state.setdefault(int(param_id), {})[name] = value
    for param_id, entries in meta.get("scalars", {}).items():
        state.setdefault(int(param_id), {}).update(entries)
    saved_groups = meta["param_groups"]
    if [len(g["params"]) for g in saved_groups] != [len(g["params"]) for g in optimizer.param_groups]:
        raise UsageError("the saved optimiser state has other parameter groups than this model; resume with the "
                         "same configuration or start a new --out")
    optimizer.load_state_dict({"state": state, "param_groups": saved_groups})
