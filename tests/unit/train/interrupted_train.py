"""``python -m sst_interp.train`` that stops right after optimiser step K (after that step's save), as if killed
there; every rank stops at the same step. A test runs it under torchrun, then resumes with the real command.

    torchrun --standalone --nproc-per-node 2 -m tests.unit.train.interrupted_train K -- TRAIN_ARGS...
"""

from __future__ import annotations

import sys

from sst_interp.cli import train as cli
from sst_interp.train import loop


class Stopped(Exception):
    """Raised after step K."""


class StopAfter(loop.TrainObserver):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, step, row):  # noqa: ANN001, D102
        if step >= self.step:
            raise Stopped


def main(argv: list[str]) -> int:
    stop, rest = int(argv[0]), argv[1:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    init = loop.Trainer.__init__

    def with_observer(self, config, **kwargs):  # noqa: ANN001
        kwargs.setdefault("observer", StopAfter(stop))
        init(self, config, **kwargs)

    loop.Trainer.__init__ = with_observer
    try:
        cli.main(rest)
    except Stopped:
        return 0
    raise SystemExit(f"the run ended before step {stop}")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
