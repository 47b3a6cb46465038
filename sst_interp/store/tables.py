"""Build Arrow tables from column dicts and write shards (one row group per question) under temporary names.

Column dicts hold one entry per row; arrays may be numpy arrays or torch tensors (moved to the CPU here, in the
writer thread). ``question_id`` [N] str, ``turn``/``position``/``iteration``/``layer`` [N] int, plus:

- hidden: ``values`` [N, d] (float32; or uint16 bfloat16 bits / a bfloat16 tensor for a bfloat16 run)
- logits: ``argmax`` [N], ``top_ids`` [N, K], ``top_logprobs`` [N, K], ``entropy`` [N], ``tracked_logprobs`` [N, K]
- sketch: ``top_indices`` [N, k] ints in [0, d) (stored as uint16 when d < 65,536, else int32; see schema)
- gates: ``active_fraction`` [N], optional ``sign_bits`` (list of N bytes, or a uint8 array [N, n_bytes])
- attention: ``head`` [N] besides the coordinates, ``offsets`` [N + 1] (row i's keys are the flat entries
  ``offsets[i]:offsets[i + 1]``), ``key_positions`` [M] and ``weights`` [M] flat, ``remaining_mass`` [N]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sst_interp.store import schema as sch
from sst_interp.store.atomic import atomic_open
from sst_interp.store.codecs import Codec
from sst_interp.store.integrity import HashingSink, Written

SORT_KEYS = {
    "hidden": ("turn", "position", "iteration", "layer"),
    "logits": ("turn", "position", "iteration"),
    "sketch": ("turn", "position", "iteration", "layer"),
    "gates": ("turn", "position", "iteration", "layer"),
    "attention": ("turn", "position", "iteration", "layer", "head"),
}
STATISTICS = ["question_id", "turn", "position", "iteration", "layer", "head"]


def build_shard_table(
    kind: str, columns: Mapping[str, Any], question_ids: Sequence[str], layout: Mapping[str, Any]
) -> tuple[pa.Table, list[str]]:
    """Validate and sort one kind's columns; returns the table (rows grouped by question in ``question_ids``
    order, then sorted by coordinates) and the question ids that have rows, in row order.

    ``layout`` holds ``hidden_size`` and ``dtype`` (hidden), ``top_k`` (logits), ``sketch_k`` and
    ``hidden_size`` (sketch: d picks the index type).
    """
    keys = SORT_KEYS[kind]
    qids = np.asarray(sch.to_numpy(columns["question_id"])).astype(str)
    n = len(qids)
    rank = {qid: i for i, qid in enumerate(question_ids)}
    unknown = set(qids.tolist()) - set(rank)
    if unknown:
        raise ValueError(f"{kind} rows for question ids not in this batch: {sorted(unknown)[:5]}")
    coords = {}
    for key in keys:
        coord = np.asarray(sch.to_numpy(columns[key])).astype(np.int32)
        if coord.shape != (n,):
            raise ValueError(f"{kind} column {key!r} has shape {coord.shape}, expected ({n},)")
        coords[key] = coord
    qrank = np.array([rank[q] for q in qids], dtype=np.int64)
    order = np.lexsort(tuple(coords[k] for k in reversed(keys)) + (qrank,))
    sorted_already = bool(np.all(order == np.arange(n)))

    def take(array: np.ndarray) -> np.ndarray:
        return array if sorted_already else array[order]

    arrays: dict[str, pa.Array] = {"question_id": pa.array(take(qids), type=pa.string())}
    for key in keys:
        arrays[key] = pa.array(take(coords[key]), type=pa.int32())
    if kind == "hidden":
        d, dtype = int(layout["hidden_size"]), str(layout["dtype"])
        arrays["values"] = sch.hidden_values_array(take(sch.to_numpy(columns["values"])), d, dtype)
        schema = sch.hidden_schema(d, dtype)
    elif kind == "logits":
        top_ids = sch.to_numpy(columns["top_ids"])
        k = _check_width(kind, top_ids, layout.get("top_k"))
        arrays["argmax"] = pa.array(take(sch.to_numpy(columns["argmax"]).astype(np.int32)), type=pa.int32())
        arrays["top_ids"] = sch.fixed_list_array(take(top_ids), k, pa.int32())
        arrays["top_logprobs"] = sch.fixed_list_array(take(sch.to_numpy(columns["top_logprobs"])), k, pa.float32())
        arrays["entropy"] = pa.array(take(sch.to_numpy(columns["entropy"]).astype(np.float32)), type=pa.float32())
        tracked = sch.to_numpy(columns["tracked_logprobs"])
        arrays["tracked_logprobs"] = sch.fixed_list_array(take(tracked), k, pa.float32())
        schema = sch.logits_schema(k)
    elif kind == "sketch":
        top = sch.to_numpy(columns["top_indices"])
        k = _check_width(kind, top, layout.get("sketch_k"))
        if layout.get("hidden_size") is None:
            raise ValueError("sketch shards need the run's hidden_size (it picks uint16 or int32 indices)")
        d = int(layout["hidden_size"])
        arrays["top_indices"] = sch.sketch_indices_array(take(top), k, d)
        schema = sch.sketch_schema(k, d)
    elif kind == "gates":
        frac = sch.to_numpy(columns["active_fraction"]).astype(np.float32)
        arrays["active_fraction"] = pa.array(take(frac), type=pa.float32())
        bits = columns.get("sign_bits")
        if bits is not None:
            arrays["sign_bits"] = pa.array(_bytes_rows(bits, order if not sorted_already else None), pa.binary())
        schema = sch.gates_schema(bits is not None)
    elif kind == "attention":
        arrays.update(_attention_arrays(columns, n, None if sorted_already else order))
        schema = sch.attention_schema()
    else:
        raise ValueError(f"unknown shard kind {kind!r}; expected one of {sch.KINDS}")
    for name, array in arrays.items():
        if len(array) != n:
            raise ValueError(f"{kind} column {name!r} has {len(array)} rows, expected {n}")
    table = pa.Table.from_arrays([arrays[f.name] for f in schema], schema=schema)
    present = list(dict.fromkeys(take(qids).tolist()))
    return table, present


def _check_width(kind: str, array: np.ndarray, expected: Any) -> int:
    if array.ndim != 2:
        raise ValueError(f"{kind} list column must be [N, k], got shape {array.shape}")
    if expected is not None and int(expected) != array.shape[1]:
        raise ValueError(f"{kind} rows have width {array.shape[1]} but the run records {expected}")
    return int(array.shape[1])


def _attention_arrays(columns: Mapping[str, Any], n: int, order: np.ndarray | None) -> dict[str, pa.Array]:
    """The list columns of an attention shard from flat values and row ``offsets`` [n + 1], rows taken in ``order``
    (None: as given)."""
    offsets = np.asarray(sch.to_numpy(columns["offsets"]), dtype=np.int64)
    keys = np.asarray(sch.to_numpy(columns["key_positions"]), dtype=np.int32)
    weights = np.asarray(sch.to_numpy(columns["weights"]), dtype=np.float32)
    if offsets.shape != (n + 1,) or offsets[0] != 0 or (np.diff(offsets) < 0).any() or offsets[-1] != len(keys) \
            or len(weights) != len(keys):
        raise ValueError(f"attention offsets must run from 0 to the {len(keys)} flat keys in {n} rows, and there must "
                         f"be one weight per key ({len(weights)})")
    lists = {"key_positions": pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(keys)),
             "weights": pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(weights))}
    remaining = pa.array(np.asarray(sch.to_numpy(columns["remaining_mass"]), dtype=np.float32), type=pa.float32())
    out = {**lists, "remaining_mass": remaining}
    if order is not None:
        out = {name: array.take(pa.array(order)) for name, array in out.items()}
    return out


def _bytes_rows(bits: Any, order: np.ndarray | None) -> list[bytes]:
    if isinstance(bits, (list, tuple)):
        rows = [bytes(b) for b in bits]
    else:
        array = np.ascontiguousarray(sch.to_numpy(bits), dtype=np.uint8)
        rows = [row.tobytes() for row in array]
    if order is not None:
        rows = [rows[i] for i in order]
    return rows


def write_shard(table: pa.Table, present: Sequence[str], final: Path, codec: Codec) -> Written:
    """Write ``table`` to ``final`` with one row group per question (rows grouped as ``present``), ``codec``'s
    compression and encodings, and a CRC per page, via a temp name + fsync + os.replace. Returns the file size in
    bytes and its sha256."""
    final.parent.mkdir(parents=True, exist_ok=True)
    qids = table.column("question_id").to_numpy(zero_copy_only=False)
    bounds = np.flatnonzero(qids[1:] != qids[:-1]) + 1 if len(qids) else np.array([], dtype=np.int64)
    starts = np.concatenate([[0], bounds]).astype(int) if len(qids) else np.array([], dtype=int)
    ends = np.concatenate([bounds, [len(qids)]]).astype(int) if len(qids) else np.array([], dtype=int)
    if len(starts) != len(present):
        raise ValueError("rows of one question must be contiguous in a shard")
    stats = [name for name in STATISTICS if name in table.schema.names]
    with atomic_open(final) as handle:
        sink = HashingSink(handle)
        with pq.ParquetWriter(sink, table.schema, use_dictionary=["question_id"], write_statistics=stats,
                              write_page_checksum=True, **codec.writer_options(table.schema)) as writer:
            for start, end in zip(starts, ends):
                writer.write_table(table.slice(start, end - start), row_group_size=max(1, end - start))
    return Written(final.stat().st_size, sink.hexdigest())


def write_table_atomic(table: pa.Table, final: Path, compression: str = "zstd",
                       row_groups: Sequence[int] | None = None) -> Written:
    """Write a small table (questions, generations, episodes) to ``final`` with a CRC per page, via temp name +
    fsync + os.replace. ``row_groups``: row counts of consecutive row groups (the writer gives each batch its
    own, so that damage to one batch's rows leaves the others readable); None: pyarrow's default grouping.
    Returns the file size in bytes and its sha256."""
    sizes = [n for n in (row_groups if row_groups is not None else [table.num_rows]) if n > 0]
    if sum(sizes) != table.num_rows:
        raise ValueError(f"row groups of {sum(sizes)} rows for a table of {table.num_rows}")
    with atomic_open(final) as handle:
        sink = HashingSink(handle)
        with pq.ParquetWriter(sink, table.schema, compression=compression, write_page_checksum=True) as writer:
            start = 0
            for size in sizes:
                writer.write_table(table.slice(start, size), row_group_size=size)
                start += size
    return Written(final.stat().st_size, sink.hexdigest())


def _contract_table(frame: pd.DataFrame, schema: pa.Schema) -> pa.Table:
    """The contract columns of ``frame`` in ``schema``'s order and types, then its extra columns."""
    base = pa.Table.from_pandas(frame[[f.name for f in schema]], schema=schema, preserve_index=False)
    for name in [c for c in frame.columns if c not in schema.names]:
        base = base.append_column(name, pa.array(frame[name].tolist()))
    return base


def episodes_table(rows: Any, depth: int, question_ids: Sequence[str]) -> pa.Table:
    """Episode rows (one per question of the batch) -> a table with the contract columns first, extras after."""
    frame = rows.copy() if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
    missing = [f.name for f in sch.EPISODES_SCHEMA if f.name not in frame.columns]
    if missing:
        raise ValueError(f"episode rows miss columns {missing}")
    if set(frame["depth"].astype(int)) - {depth}:
        raise ValueError(f"episode rows hold depths other than the batch depth {depth}")
    ids = frame["question_id"].astype(str)
    if set(ids) != set(question_ids) or ids.duplicated().any():
        raise ValueError("a batch needs exactly one episode row per question")
    return _contract_table(frame, sch.EPISODES_SCHEMA)


def generations_table(rows: Any, depth: int, question_ids: Sequence[str]) -> pa.Table:
    """Generations rows (DataFrame, list of dicts, or dict of columns) -> a table with the contract columns first.

    Missing ``depth`` is filled with the batch depth, ``turn`` with 0, ``depth_policy`` with "fixed" and
    ``chosen_depth`` with the depth. Extra columns are kept after the contract ones.
    """
    frame = rows.copy() if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
    defaults = {"depth": depth, "turn": 0, "depth_policy": "fixed", "chosen_depth": depth}
    for name, value in defaults.items():
        if name not in frame.columns:
            frame[name] = value
    missing = [f.name for f in sch.GENERATIONS_SCHEMA if f.name not in frame.columns]
    if missing:
        raise ValueError(f"generations rows miss columns {missing}")
    if set(frame["depth"].astype(int)) - {depth}:
        raise ValueError(f"generations rows hold depths other than the batch depth {depth}")
    unknown = set(frame["question_id"].astype(str)) - set(question_ids)
    if unknown:
        raise ValueError(f"generations rows for question ids not in this batch: {sorted(unknown)[:5]}")
    frame["token_ids"] = [np.asarray(t, dtype=np.int32) for t in frame["token_ids"]]
    if frame.duplicated(["question_id", "turn"]).any():
        raise ValueError("generations rows repeat a (question, turn)")
    return _contract_table(frame, sch.GENERATIONS_SCHEMA)
