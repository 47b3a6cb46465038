"""Two-pass SST training and the matched baseline (paper Sec. 3, app:training; DESIGN section 4).

Main entry points::

    from sst_interp.train import TrainConfig, Trainer, demo_config
    result = Trainer(TrainConfig(train_data="train.jsonl", val_data="val.jsonl", out="runs/sst")).run()

Command line: ``python -m sst_interp.train --help`` (``--demo`` for a CPU-sized demo, ``--baseline`` for the
matched baseline).
"""

from sst_interp.train.config import TrainConfig, demo_config
from sst_interp.train.loop import TrainObserver, Trainer, TrainResult, run_training

__all__ = ["TrainConfig", "TrainObserver", "TrainResult", "Trainer", "demo_config", "run_training"]
