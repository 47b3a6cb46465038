"""The run's settings stamped into every file the writer writes, so a lost manifest can be rebuilt from the files.

``manifest.json`` is the only place that says which model, data and layout a run was recorded with, and it is
rewritten after every batch. Every shard and table the writer writes therefore carries a copy of the manifest's
settings (everything but the writer's bookkeeping: ``status``, ``batches``, ``next_batch``, ``tables``) as Parquet
key-value metadata under :data:`STAMP_KEY`. The footer holds it, so reading it costs nothing beyond the footer
that every open already reads. ``python -m sst_interp.store repair`` rebuilds the manifest from these stamps, the
shard footers and the tables (:mod:`sst_interp.store.rebuild`).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

STAMP_KEY = b"sst_interp.run"
#: The writer's bookkeeping: rebuilt from the files themselves, so never stamped.
BOOKKEEPING_KEYS = ("status", "batches", "next_batch", "tables")


def settings_of(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest without the writer's bookkeeping: what every file of the run is stamped with."""
    return {key: value for key, value in manifest.items() if key not in BOOKKEEPING_KEYS}


def stamped(table: pa.Table, manifest: dict[str, Any]) -> pa.Table:
    """``table`` with the run's settings added to its schema metadata (kept metadata such as the dtype key)."""
    metadata = dict(table.schema.metadata or {})
    metadata[STAMP_KEY] = json.dumps(settings_of(manifest), sort_keys=True).encode()
    return table.replace_schema_metadata(metadata)


def read_stamp(meta: pq.FileMetaData) -> dict[str, Any] | None:
    """The settings stamped in a file's footer; None for a file without a stamp (written by another tool or before
    stamps) or with one that is not a JSON object."""
    raw = (meta.metadata or {}).get(STAMP_KEY)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None  # a damaged stamp is as good as none; rebuild uses another file's
    return value if isinstance(value, dict) else None
