"""Two-pass SST training and the matched baseline (paper Sec. 3, app:training).

Main entry points::

    from sst_interp.train import TrainConfig, Trainer, demo_config
    result = Trainer(TrainConfig(train_data="train.jsonl", val_data="val.jsonl", out="runs/sst")).run()

Command line: ``python -m sst_interp.train --help`` (``--demo`` for a CPU-sized demo, ``--baseline`` for the
matched baseline).
"""

from typing import TYPE_CHECKING

from sst_interp.kernels.lazy import lazy_exports, typed_exports

if TYPE_CHECKING:
    from sst_interp.train.config import TrainConfig, demo_config
    from sst_interp.train.loop import TrainObserver, Trainer, TrainResult, run_training

#: The public names are the `if TYPE_CHECKING:` imports above, each imported from its module on first use
#: (sst_interp.kernels.lazy), so importing the package stays light.
_EXPORTS = typed_exports(__name__)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
