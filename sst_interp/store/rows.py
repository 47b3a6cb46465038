"""From stored rows to a block's arrays: the row groups of one question, read with their pages checked
(:class:`GroupReader`), narrowed to a turn, layers or positions (:func:`filter_rows`, :func:`by_turn`), and
scattered onto the dense grid of their coordinates (:class:`Grid`, which refuses a cell written twice)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sst_interp.store import integrity
from sst_interp.store.errors import CorruptRunError


class GroupReader:
    """Reads row groups with CRC-checked pages, keeping one file open and the last shared row group decoded, so
    questions that share a row group (files written by other tools) do not read it once per question."""

    def __init__(self, run_path: Path, footers: dict[str, pq.FileMetaData]) -> None:
        self._run_path = run_path
        self._footers = footers  # read on open: a file is not parsed twice
        self._file: tuple[str, pq.ParquetFile] | None = None
        self._last: tuple[tuple[str, int], pa.Table] | None = None

    def rows(self, rel: str, group: int, qid: str, pinned: bool) -> pa.Table:
        """The rows of question ``qid`` in row group ``group`` of ``rel``; ``pinned``: its statistics say it holds
        only ``qid``, which is checked, since footers carry no checksum."""
        table = self._group(rel, group)
        ids = table.column("question_id")
        same = pc.equal(ids, pa.scalar(qid, ids.type.value_type if pa.types.is_dictionary(ids.type) else ids.type))
        if pinned:
            if table.num_rows and not pc.all(same).as_py():
                raise CorruptRunError(f"shard {self._run_path / rel} row group {group} does not hold only question "
                                      f"{qid!r}; {integrity.repair_advice(self._run_path / rel)}")
            return table
        return table.filter(same)

    def _group(self, rel: str, group: int) -> pa.Table:
        if self._last is not None and self._last[0] == (rel, group):
            return self._last[1]
        if self._file is None or self._file[0] != rel:
            self._file = (rel, integrity.open_parquet(self._run_path / rel, self._footers.get(rel)))
        table = integrity.read_row_group(self._file[1], self._run_path / rel, group)
        self._last = ((rel, group), table)
        return table


def bf16_rows(column: pa.Array | pa.ChunkedArray, d: int) -> np.ndarray:
    """The uint16 bit patterns ``[N, d]`` of a bfloat16 ``values`` column, a read-only view of its buffer."""
    if isinstance(column, pa.ChunkedArray):
        column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    n = len(column)
    return np.frombuffer(column.buffers()[1], dtype="<u2", count=n * d, offset=column.offset * 2 * d).reshape(n, d)


def filter_rows(table: pa.Table, **conditions: Any) -> pa.Table:
    mask = np.ones(table.num_rows, dtype=bool)
    for name, wanted in conditions.items():
        if wanted is None:
            continue
        values = table.column(name).to_numpy()
        allowed = np.atleast_1d(np.asarray(wanted, dtype=np.int64))
        mask &= np.isin(values, allowed)
    return table if mask.all() else table.filter(pa.array(mask))


def by_turn(table: pa.Table) -> Iterator[tuple[int, pa.Table]]:
    if table.num_rows == 0:
        return
    turns = table.column("turn").to_numpy()
    for t in np.unique(turns):
        mask = turns == t
        yield int(t), (table if mask.all() else table.filter(pa.array(mask)))


class Grid:
    """Scatter rows keyed by coordinate columns into a dense array over the sorted unique coordinates."""

    def __init__(self, table: pa.Table, names: Sequence[str], where: str) -> None:
        coords = [table.column(n).to_numpy().astype(np.int64) for n in names]
        self.axes = [np.unique(c) for c in coords]
        self.index = tuple(np.searchsorted(axis, c) for axis, c in zip(self.axes, coords))
        self.shape = tuple(len(a) for a in self.axes)
        # rows of one question may come from several row groups or files: a coordinate twice means two writes
        # of the same cell (e.g. a copied shard), which would otherwise overwrite each other silently
        flat = np.ravel_multi_index(self.index, self.shape) if table.num_rows else np.zeros(0, np.int64)
        if np.unique(flat).size != flat.size:
            raise CorruptRunError(f"{where} holds the same ({', '.join(names)}) more than once; the run has a "
                                  "duplicated shard or row group: remove the copy")
        # every cell has a row (no fill), and the rows already lie in grid order (the writer's layout)
        self.complete = flat.size == int(np.prod(self.shape))
        self.in_order = self.complete and bool((flat == np.arange(flat.size)).all())

    def scatter(self, rows: np.ndarray, fill: Any, dtype: Any) -> np.ndarray:
        """rows: [N, ...] -> [*grid shape, ...]; cells with no row hold ``fill``."""
        rows = np.asarray(rows)
        out = np.full(self.shape + rows.shape[1:], fill, dtype=dtype)
        out[self.index] = rows
        return out

    def arrange(self, rows: np.ndarray, fill: Any, dtype: Any) -> np.ndarray:
        """:meth:`scatter`, but ``rows`` reshaped without a copy when they already fill the grid in order (then the
        result shares ``rows``' memory, read-only when that is)."""
        rows = np.asarray(rows)
        if self.in_order and rows.dtype == np.dtype(dtype):
            return rows.reshape(self.shape + rows.shape[1:])
        if not self.complete:
            return self.scatter(rows, fill, dtype)
        out = np.empty(self.shape + rows.shape[1:], dtype=dtype)
        out[self.index] = rows
        return out
