"""Two-pass SST training and the matched baseline (paper Sec. 3, app:training).

Main entry points::

    from sst_interp.train import TrainConfig, Trainer, demo_config
    result = Trainer(TrainConfig(train_data="train.jsonl", val_data="val.jsonl", out="runs/sst")).run()

Command line: ``python -m sst_interp.train --help`` (``--demo`` for a CPU-sized demo, ``--baseline`` for the
matched baseline).
"""

from typing import TYPE_CHECKING

from sst_interp.kernels.lazy import lazy_exports

if TYPE_CHECKING:
    from sst_interp.train.config import TrainConfig, demo_config
    from sst_interp.train.loop import TrainObserver, Trainer, TrainResult, run_training

#: Where each public name lives; imported on first use so that importing the package stays light.
_EXPORTS = {
    "TrainConfig": "sst_interp.train.config",
    "demo_config": "sst_interp.train.config",
    "TrainObserver": "sst_interp.train.loop",
    "Trainer": "sst_interp.train.loop",
    "TrainResult": "sst_interp.train.loop",
    "run_training": "sst_interp.train.loop",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = ["TrainConfig", "TrainObserver", "TrainResult", "Trainer", "demo_config", "run_training"]
