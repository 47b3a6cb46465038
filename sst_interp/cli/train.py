"""``python -m sst_interp.train`` (also ``sst-train``): train an SST (two-pass) or the matched baseline.

Every :class:`~sst_interp.train.config.TrainConfig` field is a flag (``lr_sst`` -> ``--lr-sst``; booleans also have
``--no-...``; lists are comma-separated; ``--action-tokens "<execute>=262140,</execute>=262141"``). ``--demo``
starts from the demo preset (:func:`~sst_interp.train.config.demo_config`) instead of the paper's defaults and, when
no ``--train-data`` is given, writes the procedural demo data into ``OUT/data/``. Rerunning the same command resumes
from ``OUT/last/``.

Examples::

    python -m sst_interp.train --demo
    python -m sst_interp.train --train-data train.jsonl --val-data val.jsonl --out runs/sst
    python -m sst_interp.train --baseline --train-data train.jsonl --val-data val.jsonl --out runs/baseline

Data-parallel over N processes (the global batch of ``--grad-accum G`` with N processes is that of one process with
``--grad-accum G*N``; see :mod:`sst_interp.train.distributed`)::

    torchrun --nproc-per-node 2 -m sst_interp.train --train-data train.jsonl --val-data val.jsonl --grad-accum 8
    accelerate launch --multi_gpu --num_processes 2 -m sst_interp.train --train-data train.jsonl --grad-accum 8
"""

from __future__ import annotations

import argparse
import functools
import gc
import inspect
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sst_interp.cli.args import add_config_flags, config_parser, given_fields
from sst_interp.kernels.errors import UsageError, cli_entry
from sst_interp.kernels.paths import ensure_writable_folder
from sst_interp.train.config import TrainConfig, TrainPresets, codeact_demo_config, demo_config

if TYPE_CHECKING:
    from sst_interp.train.distributed import DataParallel


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: one flag per :class:`TrainConfig` field, then the :class:`TrainPresets` flags.

    Flags that are not given stay out of the parsed namespace, so a preset can tell them from its own settings.
    """
    parser = config_parser(
        "python -m sst_interp.train",
        "Two-pass SST training (paper sec:two_pass) or the matched one-pass baseline (--baseline).",
    )
    add_config_flags(parser, TrainConfig, omit_unset=True)
    add_config_flags(parser, TrainPresets, omit_unset=True)
    return parser


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The :class:`TrainConfig` of parsed arguments (the demo preset or the paper's defaults, then the flags)."""
    given = given_fields(TrainConfig, args)
    presets = TrainPresets(**given_fields(TrainPresets, args))
    demo, codeact_demo = presets.demo, presets.codeact_demo
    if demo and codeact_demo:
        raise UsageError("--demo and --codeact-demo are two different presets; pass one")
    if codeact_demo:
        if given.get("train_data") is None or given.get("val_data") is None:
            raise UsageError("--codeact-demo trains on CodeACT traces: build them with python -m "
                             "sst_interp.train.codeact_data --gsm8k PATH/train.jsonl --out DIR, then pass "
                             "--train-data DIR/train.jsonl --val-data DIR/validation.jsonl")
        if given.get("baseline"):
            given.setdefault("out", "runs/train-codeact-demo-baseline")
        config = codeact_demo_config(**given)
        ensure_writable_folder(config.out)
        return config
    default_out = inspect.signature(demo_config).parameters["out"].default if demo else \
        TrainConfig.__dataclass_fields__["out"].default
    ensure_writable_folder(given.get("out") or default_out)
    if demo:
        if given.get("baseline"):
            given.setdefault("out", "runs/train-demo-baseline")
        # the demo's procedural data is written into OUT/data by main, once every input has been checked
        return demo_config(**given)
    return TrainConfig(**given)


def needs_demo_data(args: argparse.Namespace, config: TrainConfig) -> bool:
    """Whether ``--demo`` without ``--train-data`` will write the procedural demo data into ``OUT/data``."""
    return TrainPresets(**given_fields(TrainPresets, args)).demo and config.train_data is None


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, train, print where the checkpoint is. Bad input exits with code 2 and one line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    config = config_from_args(args)
    import torch

    from sst_interp.train import distributed

    from sst_interp.train.preflight import check_launch

    dp = distributed.from_environment()
    check_launch(config, dp)  # every cheap check before the banner, and before anything is written
    if needs_demo_data(args, config):
        from sst_interp.train.demo_data import write_demo_data

        train, val = write_demo_data(Path(config.out) / "data")
        config.train_data, config.val_data = str(train), str(val)
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    warning = distributed.single_process_accelerate_warning()
    if warning is not None:
        print(warning, file=sys.stderr)
    try:
        return _train(config, dp)
    except BaseException as err:
        # The traceback keeps the trainer's frames, and with them the model (FSDP's sharded modules hold the process
        # group), alive past leave(); freed after the group is gone, they abort the process at exit (seen under
        # load with --fsdp). Freed here first, as they are when _train returns.
        traceback.clear_frames(err.__traceback__)
        gc.collect()
        raise
    finally:
        distributed.leave()


def _train(config: TrainConfig, dp: DataParallel) -> int:
    """Train ``config`` as process ``dp``; rank 0 prints, the other ranks stay quiet."""
    from sst_interp.train import distributed
    from sst_interp.train.loop import Trainer

    say = functools.partial(distributed.say, dp)

    def banner() -> None:
        # printed by the trainer once the data and --out are checked: an input error is the only line printed
        what = "baseline (one pass, no SST)" if config.baseline else \
            f"SST (two-pass, state_scale={config.state_scale})"
        say(f"training the {what} on {config.model}; preset {config.preset}; writing {config.out}")
        if dp.enabled:
            say(f"data-parallel over {dp.world_size} processes: {config.grad_accum} micro-batches of "
                f"{config.micro_batch_size} per process per step, {config.grad_accum * dp.world_size} in all")
        if config.preset == "demo":
            say("demo preset: LoRA rank 8, LoRA lr 1e-3, 16 steps of 2 packed 96-token sequences, one thread, "
                "state_scale=hidden (not the paper's settings; see sst_interp.train.config.demo_config)")

    trainer = Trainer(config, on_validated=banner)
    if trainer.sharding is not None:
        say(trainer.sharding)
    if trainer.resumed:
        say(f"resuming from {config.out}/last at step {trainer.step}")
    result = trainer.run()
    if not dp.is_main:
        return 0
    first = result.log["train_loss"].iloc[0] if len(result.log) else float("nan")
    last = result.log["train_loss"].iloc[-1] if len(result.log) else float("nan")
    best = "-" if result.best_val_loss is None else f"{result.best_val_loss:.4f} at step {result.best_step}"
    print(f"done: {result.steps} steps ({result.stop_reason}); train loss {first:.4f} -> {last:.4f}; "
          f"best validation loss {best}")
    print(f"checkpoint: {result.best_checkpoint}")
    if not config.baseline:
        print(f"record it with: python -m sst_interp.record --checkpoint {result.best_checkpoint}")
    return 0


def console() -> int:
    """The ``sst-train`` console script."""
    return main()
