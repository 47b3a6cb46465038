"""What no page checksum covers, and rebuilding a damaged table from the part of it that verifies.

A Parquet file's pages carry CRCs; its footer does not. The footer holds the schema twice (the Parquet schema and
pyarrow's serialised Arrow schema, ``ARROW:schema``) and key-value metadata that readers decode: pandas' JSON
(twice: a key of its own and inside the Arrow schema; ``pq.read_table`` uses the second, ``read_row_group`` the
first) and the run's stamp. A flip there passes every page check and only the whole file's sha256 sees it.

Hence the rule every write path follows (docs/format.md, "Damage is never blessed"): a file that fails
verification is never rewritten with its content as read and hashed again. A table is rebuilt by
:func:`salvage_table` from what verifies (the rows of row groups whose pages pass their CRCs, in the columns both
schema copies agree on and the contract requires) under a footer this package makes afresh (no key-value metadata
is copied from the damaged file), or it is left alone and reported.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sst_interp.store import contract, stamp
from sst_interp.store.errors import CorruptRunError
from sst_interp.store.integrity import DECODE_ERRORS

#: Footer keys holding JSON that a reader decodes (pandas on ``to_pandas``, the stamp on rebuild and verify).
JSON_KEYS = (b"pandas", stamp.STAMP_KEY)


def footer_problem(meta: pq.FileMetaData) -> str | None:
    """What is wrong with the parts of a footer that a reader decodes and no page CRC covers (the JSON metadata,
    in both its copies, and the Arrow schema, which must name the Parquet schema's columns); None when they
    decode and agree."""
    try:
        raw_metadata = dict(meta.metadata or {})
        arrow = meta.schema.to_arrow_schema()
        leaves = [meta.schema.column(i).path.split(".")[0] for i in range(meta.num_columns)]
    except DECODE_ERRORS as err:
        return f"its footer's schema does not decode ({_reason(err)})"
    if list(arrow.names) != list(dict.fromkeys(leaves)):
        return "its footer's two copies of the schema disagree on the column names"
    for where, metadata in (("", raw_metadata), (" (in the Arrow schema)", dict(arrow.metadata or {}))):
        for key in JSON_KEYS:
            raw = metadata.get(key)
            if raw is None:
                continue
            try:
                json.loads(raw.decode("utf-8"))
            except ValueError as err:  # UnicodeDecodeError and JSONDecodeError are both ValueErrors
                return f"its footer's {key.decode()} metadata{where} does not decode ({_reason(err)})"
    return None


def _reason(err: BaseException) -> str:
    """An exception's message on one line, without the bytes a UnicodeDecodeError quotes."""
    if isinstance(err, UnicodeDecodeError):
        return f"{err.reason} at byte {err.start}"
    return " ".join(str(err).split())[:200]


def salvage_table(target: Path, name: str) -> pa.Table | None:
    """The rows of table ``name`` (``generations.parquet``, ...) at ``target`` that verify, with no schema metadata
    (the caller stamps it afresh); None when nothing in it can be trusted: its footer does not read, its two schema
    copies disagree, or it lacks a contract column.

    Rows of a row group whose pages fail their CRCs are left out (the caller re-records their batch)."""
    try:
        handle = pq.ParquetFile(target, page_checksum_verification=True)
        meta = handle.metadata
        schema = meta.schema.to_arrow_schema()
    except (OSError, *DECODE_ERRORS):
        return None  # no footer left to read the rows with: nothing to salvage
    problem = footer_problem(meta)
    if problem is not None and "metadata" not in problem:
        return None  # the schema itself is in doubt; damaged JSON metadata is dropped below, not a reason
    try:
        contract.check_columns(target, schema, contract.TABLE_COLUMNS[name])
    except CorruptRunError:
        return None
    schema = schema.remove_metadata()
    groups = []
    for group in range(meta.num_row_groups):
        try:
            groups.append(handle.read_row_group(group).cast(schema))
        except (OSError, *DECODE_ERRORS):
            continue  # a page fails its CRC: that row group's batch is recorded again
    return pa.concat_tables(groups) if groups else schema.empty_table()


def fresh(table: pa.Table, manifest: dict[str, Any]) -> pa.Table:
    """``table`` under a footer this package makes: no key-value metadata but the run's stamp (the pandas and
    any other metadata a read carried along is dropped, so that nothing unverified is written again)."""
    return stamp.stamped(table.replace_schema_metadata(None), manifest)


def check_footer(target: Path, meta: pq.FileMetaData, advice: str) -> pq.FileMetaData:
    """``meta`` when :func:`footer_problem` finds nothing, else a CorruptRunError naming ``target``."""
    problem = footer_problem(meta)
    if problem is not None:
        raise CorruptRunError(f"{target} is damaged ({problem}); {advice}")
    return meta


def batch_row_groups(table: pa.Table, manifest: dict[str, Any]) -> list[int]:
    """Row counts of runs of consecutive rows from the same batch: the row groups a rewritten table keeps, so
    that damage to one batch's rows stays confined to that batch."""
    batch_of = {(q, int(depth)): b["batch"] for depth, batches in manifest.get("batches", {}).items()
                for b in batches for q in b["question_ids"]}
    ids = [batch_of.get((q, int(d)), -1) for q, d in zip(table.column("question_id").to_pylist(),
                                                            table.column("depth").to_pylist())]
    sizes: list[int] = []
    for i, batch in enumerate(ids):
        if i and batch == ids[i - 1]:
            sizes[-1] += 1
        else:
            sizes.append(1)
    return sizes
