"""Find a run's shards from the directory layout (hive partitions ``KIND/depth=D/*.parquet``) and locate each
question's rows in them from the Parquet footers.

Nothing here depends on the writer's private manifest index: a run written by another tool to the contract of
docs/format.md is found the same way. Rows of one question may sit in one or several row groups of one or
several files; the writer puts each question in a row group of its own, which lets a question be read without
reading its neighbours, but any grouping reads correctly.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from sst_interp.store import integrity
from sst_interp.store import schema as sch
from sst_interp.store.atomic import is_temp_name

_PARTITION = re.compile(r"^depth=(\d+)$")
TABLE_NAMES = ("questions.parquet", "generations.parquet", "episodes.parquet")


@dataclass(frozen=True)
class ShardFile:
    """One shard file found in the layout: kind, depth, path relative to the run, and its footer."""

    kind: str
    depth: int
    rel: str
    metadata: pq.FileMetaData


def shard_paths(run_path: Path) -> Iterator[tuple[str, int, str]]:
    """(kind, depth, relative path) of every complete shard file, in a stable order. Temporary files of an
    unfinished write (see :mod:`sst_interp.store.atomic`) and files outside ``depth=D`` folders are not shards."""
    for kind in sch.KINDS:
        root = run_path / kind
        if not root.is_dir():
            continue
        for part in sorted(root.iterdir()):
            match = _PARTITION.match(part.name)
            if not (match and part.is_dir()):
                continue
            for file in sorted(part.glob("*.parquet")):
                if file.is_file() and not is_temp_name(file.name):
                    yield kind, int(match.group(1)), file.relative_to(run_path).as_posix()


@dataclass
class QuestionIndex:
    """Where each question's rows of one kind at one depth are: question id -> [(relative path, row group)].

    Built from row-group statistics of ``question_id`` where min == max (one question per row group, as the
    writer writes); other row groups have their ``question_id`` column read (one column, CRC-checked).
    """

    places: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    #: row groups that hold exactly one question according to their statistics (their rows need no filter)
    pinned: set[tuple[str, int]] = field(default_factory=set)

    @classmethod
    def build(cls, run_path: Path, files: list[ShardFile]) -> QuestionIndex:
        """Index ``files`` (all of one kind and depth)."""
        index = cls()
        for shard in files:
            meta = shard.metadata
            column = meta.schema.to_arrow_schema().get_field_index("question_id")
            for group in range(meta.num_row_groups):
                row_group = meta.row_group(group)
                if row_group.num_rows == 0:
                    continue
                only = single_value(row_group.column(column).statistics)
                if only is not None:
                    index.places.setdefault(only, []).append((shard.rel, group))
                    index.pinned.add((shard.rel, group))
                    continue
                handle = integrity.open_parquet(run_path / shard.rel, metadata=meta)
                ids = integrity.read_row_group(handle, run_path / shard.rel, group, ["question_id"]).column(0)
                for qid in pc.unique(ids).to_pylist():
                    index.places.setdefault(str(qid), []).append((shard.rel, group))
        return index


def single_value(stats: pq.Statistics | None) -> str | None:
    """The one value of a string column chunk whose statistics say min == max and no nulls, else None."""
    if stats is None or not stats.has_min_max or stats.null_count:
        return None
    low, high = stats.min, stats.max
    if isinstance(low, bytes):
        low, high = low.decode("utf-8", "replace"), high.decode("utf-8", "replace")
    return str(low) if low == high else None
