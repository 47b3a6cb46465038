"""The checks of ``train`` that need neither the model nor the data: launcher, device, ``--fsdp``, the model source
and ``--out``.

``python -m sst_interp.train`` runs them before it prints its banner or writes anything under ``--out`` (the demo
preset's data included), and :class:`~sst_interp.train.loop.Trainer` runs them again for library callers, so a
refused command leaves ``--out`` as it found it (issue 26 item 4).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.paths import ensure_writable_folder
from sst_interp.model.backbone import check_model_source, local_vocab_size
from sst_interp.train.config import TrainConfig
from sst_interp.train.distributed import DataParallel
from sst_interp.train.modeling import training_device


def check_launch(config: TrainConfig, dp: DataParallel, model: bool = True) -> torch.device:
    """Refuse a launch that cannot work (UsageError) and return this process's device.

    Args:
        config: the training configuration.
        dp: this process's place (:func:`sst_interp.train.distributed.from_environment`).
        model: also check ``config.model`` (a missing path, an unreachable hub id); library callers that pass a
            loaded backbone skip it.
    """

    if config.fsdp and not dp.enabled:
        raise UsageError("--fsdp shards the frozen backbone over several processes; launch with torchrun "
                         "--nproc-per-node N (or accelerate launch --multi_gpu --num_processes N), or drop --fsdp")
    if dp.enabled and not _group_exists():
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if name not in os.environ:
                raise UsageError(f"WORLD_SIZE={dp.world_size} but {name} is unset; launch with torchrun, or set "
                                 "MASTER_ADDR and MASTER_PORT as torchrun does")
    device = training_device(config, dp.local_rank if dp.enabled else None)
    if model:
        check_model_source(config.model)
        _check_action_tokens(config)
    ensure_writable_folder(config.out)
    return device


def _group_exists() -> bool:
    """Whether the caller already joined a process group (then the launcher variables are not needed)."""

    return dist.is_available() and dist.is_initialized()


def _check_action_tokens(config: TrainConfig) -> None:
    """Action token ids must be tokens of the model's vocabulary (read from its config.json where it is local;
    the trainer checks again against the loaded model)."""

    if not config.action_tokens:
        return
    vocab = local_vocab_size(config.model)
    bad = {token: i for token, i in config.action_tokens.items() if vocab is not None and i >= vocab}
    if bad:
        raise UsageError(f"action token ids {bad} are outside the model's vocabulary of {vocab}; map them to "
                         f"reserved ids below {vocab} with --action-tokens")
