"""Cheap structural checks of run files: a readable Parquet footer, and for a shard the writer's index lists,
presence, size and row count. Content (pages, sha256) is checked by :mod:`sst_interp.store.integrity`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from sst_interp.store.errors import CorruptRunError
from sst_interp.store.integrity import DECODE_ERRORS, repair_advice
from sst_interp.store.salvage import check_footer

_ADVICE = "rerun the same record command: it records this file's questions again"


def read_footer(target: Path) -> pq.FileMetaData:
    """The Parquet footer of ``target``; CorruptRunError naming the file when it cannot be read or its schema and
    JSON metadata do not decode (:func:`~sst_interp.store.salvage.footer_problem`)."""
    try:
        meta = pq.read_metadata(target)
    except (OSError, *DECODE_ERRORS) as err:
        raise CorruptRunError(f"shard {target} has an unreadable Parquet footer ({err}); {_ADVICE}") from err
    return check_footer(target, meta, repair_advice(target))


def check_shard(run_path: Path, shard: dict[str, Any]) -> pq.FileMetaData:
    """Raise CorruptRunError when the shard ``shard["file"]`` does not match its manifest entry.

    Checks existence, byte size, the Parquet footer (pyarrow.parquet.read_metadata), the row count and that
    there is one row group per listed question. Returns the footer.
    """
    target = run_path / shard["file"]
    if not target.exists():
        raise CorruptRunError(f"shard {target} listed in the manifest is missing; rerun the same record command "
                              "to record its questions again")
    size = target.stat().st_size
    if size != shard["bytes"]:
        raise CorruptRunError(f"shard {target} is truncated or changed ({size} bytes, the manifest says "
                              f"{shard['bytes']}); {_ADVICE}")
    meta = read_footer(target)
    if meta.num_rows != shard["rows"] or meta.num_row_groups != len(shard["question_ids"]):
        raise CorruptRunError(f"shard {target} holds {meta.num_rows} rows in {meta.num_row_groups} row groups, the "
                              f"manifest says {shard['rows']} rows for {len(shard['question_ids'])} questions; "
                              f"{_ADVICE}")
    return meta


def check_table_file(target: Path) -> pq.FileMetaData:
    """The footer of a top-level table (questions/generations/episodes.parquet); CorruptRunError when unreadable or
    when its schema and JSON metadata do not decode."""
    try:
        meta = pq.read_metadata(target)
    except (OSError, *DECODE_ERRORS) as err:
        raise CorruptRunError(f"{target} has an unreadable Parquet footer ({err}); rerun the same record command: it "
                              "records this table's questions again") from err
    return check_footer(target, meta, repair_advice(target))
