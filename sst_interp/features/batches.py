"""The training data of a dictionary: an endless stream of shuffled batches of a site's states, for SAELens'
``SAETrainer`` (its ``data_provider`` is any iterator of activation batches).

SAELens counts training samples by its configured batch size, not by the rows it receives, and calls ``next`` for
as long as it trains (and 1,000 more times first when it estimates the activation scale), so the stream is endless
and every batch has exactly ``batch_size`` rows. The states are read a shard file at a time and mixed in a buffer of
``buffer`` rows (a shuffled buffer is emitted in batches and the remainder carried into the next); at the end of the
run the stream starts over, so a small run is passed over several times (epochs). When the site's training states
fit in the buffer, the first pass keeps them and later passes reshuffle them without rereading the shards. Memory:
the buffer, never the run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import numpy as np
import torch

from sst_interp.features.sites import StateSite
from sst_interp.features.states import Split, site_rows
from sst_interp.kernels.errors import UsageError
from sst_interp.store import Run


class StateBatches:
    """Endless batches [batch_size, d] float32 of the states of ``site`` at ``iterations`` that ``split`` takes.

    Attributes:
        tokens: per iteration, the distinct states read so far (complete once :attr:`epochs` >= 1).
        epochs: complete passes over the run.
    """

    def __init__(self, run: Run, site: StateSite, iterations: tuple[int, ...], split: Split, batch_size: int,
                 buffer: int, seed: int) -> None:
        if batch_size < 1 or buffer < batch_size:
            raise UsageError(f"--batch-size must be >= 1 and --buffer >= it, got {batch_size} and {buffer}")
        self.run, self.site, self.iterations, self.split = run, site, iterations, split
        self.batch_size, self.buffer = int(batch_size), int(buffer)
        self._rng = np.random.default_rng(seed)
        self.tokens: Counter[int] = Counter()
        self.epochs = 0
        self._stream = self._batches()

    def __iter__(self) -> StateBatches:
        return self

    def __next__(self) -> torch.Tensor:
        return next(self._stream)

    def _chunks(self) -> Iterator[tuple[np.ndarray, bool]]:
        """The states, a shard file at a time, over and over (counting the first pass's states per iteration). When
        the first pass holds no more than ``buffer`` states, they stay in memory and later passes reread none (each
        is then yielded whole, flagged True: one pass is shuffled by itself)."""
        resident: list[np.ndarray] | None = []
        while True:
            rows = 0
            for part in site_rows(self.run, self.site, self.split, self.iterations):
                rows += len(part)
                if self.epochs == 0:
                    self.tokens.update(part.iteration.tolist())
                if resident is not None and rows <= self.buffer:
                    resident.append(part.values)
                else:
                    resident = None  # more than the buffer holds: every pass rereads the shards
                yield part.values, False
            if rows == 0:
                raise UsageError(f"{self.run.path} holds no training states at {self.site.describe()} (every question "
                                 f"is held out, or none is recorded there); record more questions or lower --holdout")
            self.epochs += 1
            if resident is not None:
                break
        whole = np.concatenate(resident)
        while True:
            yield whole, True
            self.epochs += 1

    def _batches(self) -> Iterator[torch.Tensor]:
        return shuffled_batches(self._chunks(), self.run.hidden_size, self.batch_size, self.buffer, self._rng)


def shuffled_batches(chunks: Iterator[tuple[np.ndarray, bool]], width: int, batch_size: int, buffer: int,
                     rng: np.random.Generator) -> Iterator[torch.Tensor]:
    """Batches [batch_size, width] float32 of the rows of ``chunks`` (``(values [n, width], whole)``), mixed in a
    buffer of ``buffer`` rows: a chunk flagged ``whole`` is a complete pass, shuffled by itself."""
    pending: list[np.ndarray] = [np.empty((0, width), dtype=np.float32)]
    held = 0
    for values, whole in chunks:
        pending.append(values)
        held += len(values)
        if held < buffer and not whole:
            continue
        mixed = np.concatenate(pending)
        mixed = mixed[rng.permutation(len(mixed))]
        full = len(mixed) // batch_size * batch_size
        for start in range(0, full, batch_size):
            yield torch.from_numpy(mixed[start:start + batch_size])
        pending, held = [mixed[full:]], len(mixed) - full
