"""Check shard files against the manifest: present, same size, a readable Parquet footer, same row count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sst_interp.store.errors import CorruptRunError

_ADVICE = "delete it and rerun the same record command to resume (its questions are recorded again)"


def check_shard(run_path: Path, shard: dict[str, Any]) -> None:
    """Raise CorruptRunError when the shard ``shard["file"]`` does not match its manifest entry.

    Checks existence, byte size, the Parquet footer (pyarrow.parquet.read_metadata), the row count and that
    there is one row group per listed question.
    """
    target = run_path / shard["file"]
    if not target.exists():
        raise CorruptRunError(f"shard {target} listed in the manifest is missing; rerun the same record command "
                              "to record its questions again")
    size = target.stat().st_size
    if size != shard["bytes"]:
        raise CorruptRunError(f"shard {target} is truncated or changed ({size} bytes, the manifest says "
                              f"{shard['bytes']}); {_ADVICE}")
    try:
        meta = pq.read_metadata(target)
    except (OSError, pa.ArrowException) as err:
        raise CorruptRunError(f"shard {target} has an unreadable Parquet footer ({err}); {_ADVICE}") from err
    if meta.num_rows != shard["rows"] or meta.num_row_groups != len(shard["question_ids"]):
        raise CorruptRunError(f"shard {target} holds {meta.num_rows} rows in {meta.num_row_groups} row groups, the "
                              f"manifest says {shard['rows']} rows for {len(shard['question_ids'])} questions; "
                              f"{_ADVICE}")


def check_table_file(target: Path) -> None:
    """Raise CorruptRunError when a top-level table (questions/generations.parquet) has no readable footer."""
    try:
        pq.read_metadata(target)
    except (OSError, pa.ArrowException) as err:
        raise CorruptRunError(f"{target} has an unreadable Parquet footer ({err}); delete it and rerun the same "
                              "record command") from err
