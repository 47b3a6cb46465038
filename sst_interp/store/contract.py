"""The data contract of docs/format.md, as checks: required manifest fields, and contract columns per file.

A run written by any tool to this contract is readable from these fields and the Parquet schemas alone; anything
else in the manifest (batch index, checksums) is the writer's own. Every check raises a one-line error naming the
file and the field or column: a :class:`UsageError` when the manifest is not a run of this schema, a
:class:`CorruptRunError` when a file of a run breaks the contract.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from sst_interp.kernels.errors import UsageError
from sst_interp.store import schema as sch
from sst_interp.store.errors import CorruptRunError

PROTOCOLS = ("completion", "codeact")
#: Fields a run written by this package before they were part of the contract may lack, with what they meant.
LEGACY_DEFAULTS = {"protocol": "completion", "prompt_mode": "unknown"}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_int_list(value: Any) -> bool:
    return isinstance(value, list) and all(_is_int(v) for v in value)


def _is_status(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    for depth, ids in value.items():
        if not (isinstance(depth, str) and depth.strip().isdigit()):
            return False
        if not (isinstance(ids, list) and all(isinstance(q, str) for q in ids)):
            return False
    return True


_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "schema_version": (_is_int, "an int"),
    "depths": (_is_int_list, "a list of ints"),
    "num_layers": (lambda v: _is_int(v) and v > 0, "a positive int"),
    "hidden_size": (lambda v: _is_int(v) and v > 0, "a positive int"),
    "dtype": (lambda v: v in sch.HIDDEN_DTYPES, f"one of {'|'.join(sch.HIDDEN_DTYPES)}"),
    "top_k": (lambda v: _is_int(v) and v >= 0, "a non-negative int"),
    "full_positions": (lambda v: _is_int(v) and v >= 0, "a non-negative int"),
    "protocol": (lambda v: v in PROTOCOLS, f"one of {'|'.join(PROTOCOLS)}"),
    "prompt_mode": (lambda v: isinstance(v, str), "a string"),
    "status": (_is_status, "an object {depth as a string: [question_id, ...]}"),
}
REQUIRED_FIELDS = tuple(_FIELDS)


def check_manifest(target: Path, manifest: Any) -> dict[str, Any]:
    """Check the required manifest fields (docs/format.md) of ``target``; returns the manifest with the
    legacy defaults filled in. Raises UsageError naming the first missing or mistyped field."""
    if not isinstance(manifest, dict):
        raise UsageError(f"{target} is not a JSON object; it is not a run manifest")
    version = manifest.get("schema_version")
    if version != sch.SCHEMA_VERSION:
        raise UsageError(f"{target.parent} has run schema version {version!r}; this package reads version "
                         f"{sch.SCHEMA_VERSION}")
    filled = dict(manifest)
    for name, default in LEGACY_DEFAULTS.items():
        filled.setdefault(name, default)
    for name, (valid, expected) in _FIELDS.items():
        if name not in filled:
            raise UsageError(f"{target} lacks the required field {name!r} ({expected}); it is not a complete run "
                             "manifest (see docs/format.md)")
        if not valid(filled[name]):
            raise UsageError(f"{target} field {name!r} must be {expected}, got {filled[name]!r}")
    return filled


# ---------------------------------------------------------------------------------------------- columns


@dataclass(frozen=True)
class Column:
    """One contract column: its name, a type test and the type in words (for the error)."""

    name: str
    valid: Callable[[pa.DataType], bool]
    expected: str


def _string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _list_of(test: Callable[[pa.DataType], bool]) -> Callable[[pa.DataType], bool]:
    def check(t: pa.DataType) -> bool:
        listy = pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
        return listy and test(t.value_type)
    return check


def _fixed_list_of(test: Callable[[pa.DataType], bool], size: int | None) -> Callable[[pa.DataType], bool]:
    def check(t: pa.DataType) -> bool:
        return pa.types.is_fixed_size_list(t) and test(t.value_type) and (size is None or t.list_size == size)
    return check


def _int32(t: pa.DataType) -> bool:
    return pa.types.is_int32(t)


def _float32(t: pa.DataType) -> bool:
    return pa.types.is_float32(t)


STR = Column("", _string, "str")
INT = Column("", pa.types.is_integer, "int")


def _cols(spec: list[tuple[str, Column]]) -> list[Column]:
    return [Column(name, kind.valid, kind.expected) for name, kind in spec]


_COORDS = [("question_id", STR), ("turn", INT), ("position", INT), ("iteration", INT)]

TABLE_COLUMNS: dict[str, list[Column]] = {
    # a column of only empty lists has no value type to infer (pyarrow gives list<null>): it is a list<str>
    "questions.parquet": _cols([("question_id", STR), ("source", STR), ("prompt", STR), ("reference", STR),
                                ("metadata", STR)])
    + [Column("choices", _list_of(lambda t: _string(t) or pa.types.is_null(t)), "list<str>")],
    "generations.parquet": _cols([("question_id", STR), ("depth", INT), ("turn", INT), ("text", STR),
                                  ("n_tokens", INT), ("stop_reason", STR), ("extracted_answer", STR),
                                  ("grader", STR), ("depth_policy", STR), ("chosen_depth", INT)])
    + [Column("token_ids", _list_of(_int32), "list<int32>"), Column("correct", pa.types.is_boolean, "bool")],
    "episodes.parquet": _cols([("question_id", STR), ("depth", INT), ("n_turns", INT), ("stop_reason", STR),
                               ("final_answer", STR), ("grader", STR), ("depth_policy", STR), ("chosen_depth", INT)])
    + [Column("correct", pa.types.is_boolean, "bool")],
}


def shard_columns(kind: str, layout: Mapping[str, Any], file_dtype: str | None) -> list[Column]:
    """Contract columns of a ``kind`` shard; ``layout`` is the checked manifest, ``file_dtype`` the shard's
    ``sst_interp.dtype`` schema metadata (hidden only)."""
    coords = _cols(_COORDS)
    if kind == "hidden":
        d = int(layout["hidden_size"])
        if file_dtype == "bfloat16":
            values = Column("values", lambda t: pa.types.is_fixed_size_binary(t) and t.byte_width == 2 * d,
                            f"fixed_size_binary[{2 * d}] (bfloat16 bits, hidden_size {d})")
        else:
            values = Column("values", _fixed_list_of(_float32, d), f"fixed_size_list<float32>[{d}]")
        return coords + _cols([("layer", INT)]) + [values]
    if kind == "logits":
        k = int(layout["top_k"])
        return coords + [
            Column("argmax", _int32, "int32"),
            Column("top_ids", _fixed_list_of(_int32, k), f"fixed_size_list<int32>[{k}] (top_k)"),
            Column("top_logprobs", _fixed_list_of(_float32, k), f"fixed_size_list<float32>[{k}] (top_k)"),
            Column("entropy", _float32, "float32"),
            Column("tracked_logprobs", _fixed_list_of(_float32, k), f"fixed_size_list<float32>[{k}] (top_k)"),
        ]
    if kind == "sketch":
        return coords + _cols([("layer", INT)]) + [_sketch_indices(int(layout["hidden_size"]))]
    if kind == "gates":
        return coords + _cols([("layer", INT)]) + [Column("active_fraction", _float32, "float32")]
    if kind == "attention":
        return coords + _cols([("layer", INT), ("head", INT)]) + [
            Column("key_positions", _list_of(_int32), "list<int32>"),
            Column("weights", _list_of(_float32), "list<float32>"),
            Column("remaining_mass", _float32, "float32"),
        ]
    raise ValueError(f"unknown shard kind {kind!r}; expected one of {sch.KINDS}")


def _sketch_indices(d: int) -> Column:
    """``top_indices``: int32 for any d (every run written before uint16 sketches, and d >= 65,536), or uint16 when
    d < 65,536 (a uint16 column in a run with a larger d could not hold its indices)."""
    if d < sch.UINT16_INDEX_LIMIT:
        return Column("top_indices", _fixed_list_of(lambda t: _int32(t) or pa.types.is_uint16(t), None),
                      f"fixed_size_list<uint16 or int32>[k] (hidden_size {d})")
    return Column("top_indices", _fixed_list_of(_int32, None), f"fixed_size_list<int32>[k] (hidden_size {d} >= "
                  f"{sch.UINT16_INDEX_LIMIT})")


def check_columns(target: Path, schema: pa.Schema, columns: list[Column]) -> None:
    """Raise CorruptRunError naming ``target`` and the first contract column missing from or mistyped in
    ``schema``."""
    for column in columns:
        index = schema.get_field_index(column.name)
        if index < 0:
            raise CorruptRunError(f"{target} lacks the contract column {column.name!r} ({column.expected}); it "
                                  "was not written to the run format (docs/format.md)")
        found = schema.field(index).type
        if not column.valid(found):
            raise CorruptRunError(f"{target} column {column.name!r} is {found}, the contract says "
                                  f"{column.expected} (docs/format.md)")


def check_shard_schema(target: Path, kind: str, schema: pa.Schema, layout: Mapping[str, Any]) -> None:
    """Check a shard's schema: contract columns, and for hidden the ``sst_interp.dtype`` metadata, which must
    name the run's dtype."""
    file_dtype = None
    if kind == "hidden":
        raw = (schema.metadata or {}).get(sch.DTYPE_KEY)
        file_dtype = raw.decode() if raw is not None else None
        if file_dtype not in sch.HIDDEN_DTYPES:
            raise CorruptRunError(f"{target} has schema metadata {sch.DTYPE_KEY.decode()}={file_dtype!r}, the "
                                  f"contract needs one of {'|'.join(sch.HIDDEN_DTYPES)}")
        if file_dtype != layout["dtype"]:
            raise CorruptRunError(f"{target} holds {file_dtype} hidden states, the manifest says dtype "
                                  f"{layout['dtype']!r}")
    check_columns(target, schema, shard_columns(kind, layout, file_dtype))
