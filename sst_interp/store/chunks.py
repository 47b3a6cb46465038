"""Hidden states read a shard file at a time, as rows (:meth:`Run.hidden_rows <sst_interp.store.reader.Run.hidden_rows>`).

:meth:`~sst_interp.store.reader.Run.hidden` arranges one (question, turn) on its dense grid, which costs a few
milliseconds of bookkeeping per question: right for analyses that look at one question, far below the read floor for
a consumer that wants every state of a site (a dictionary's training set: 10,000 organism questions read at about
1,600 rows/s through ``hidden_raw`` against 37,000 rows/s for the shards alone). A :class:`HiddenChunk` is one shard
file's rows, narrowed to the asked coordinates before the values are decoded, with its coordinates as columns; the
pages are CRC-checked as every read of this package does, and rows of questions the manifest does not list as done at
the depth are left out, as :meth:`~sst_interp.store.reader.Run.hidden` leaves them out.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sst_interp.store import integrity
from sst_interp.store import schema as sch

#: The coordinate columns of a hidden shard, as a chunk carries them.
COORDINATES = ("turn", "position", "iteration", "layer")


@dataclass(frozen=True)
class HiddenChunk:
    """The rows of one shard file at one depth, in the file's order.

    Args:
        question_id: [N] object (str), each row's question.
        turn, position, iteration, layer: [N] int64, each row's coordinates.
        values: [N, d] float32 (bfloat16 widened exactly).
        file: the shard, relative to the run.
    """

    question_id: np.ndarray
    turn: np.ndarray
    position: np.ndarray
    iteration: np.ndarray
    layer: np.ndarray
    values: np.ndarray
    file: str

    def __len__(self) -> int:
        return int(self.values.shape[0])


def read_chunks(run_path: Path, files: Sequence[tuple[str, pq.FileMetaData]], d: int, dtype: str, done: set[str],
                layers: Sequence[int] | None = None, iterations: Sequence[int] | None = None,
                positions: Sequence[int] | None = None, turn: int | None = None) -> Iterator[HiddenChunk]:
    """One :class:`HiddenChunk` per file of ``files`` (hidden shards of one depth, relative to ``run_path``, each with
    the footer read when the run was opened) that holds
    a wanted row: the rows whose coordinates are in ``layers``, ``iterations``, ``positions`` and ``turn`` (None: any)
    and whose question is in ``done``. A damaged page is a CorruptRunError naming the file."""
    wanted = {"layer": layers, "iteration": iterations, "position": positions,
              "turn": None if turn is None else [turn]}
    value_set = pa.array(sorted(done), type=pa.string())
    for rel, footer in files:
        table = integrity.read_file(run_path / rel, footer)
        mask = np.ones(table.num_rows, dtype=bool)
        for name, allowed in wanted.items():
            if allowed is not None:
                mask &= np.isin(table.column(name).to_numpy(), np.asarray(list(allowed), dtype=np.int64))
        ids = table.column("question_id").cast(pa.string())  # dictionary-encoded as the writer writes it
        mask &= pc.is_in(ids, value_set=value_set).to_numpy(zero_copy_only=False)
        if not mask.any():
            continue
        if not mask.all():
            table, ids = table.filter(pa.array(mask)), ids.filter(pa.array(mask))
        yield HiddenChunk(
            question_id=ids.to_numpy(zero_copy_only=False).astype(object),
            **{name: table.column(name).to_numpy().astype(np.int64) for name in COORDINATES},
            values=sch.decode_hidden_values(table.column("values"), d, dtype),
            file=rel,
        )
