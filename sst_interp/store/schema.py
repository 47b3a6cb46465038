"""Parquet schemas of a run directory (docs/format.md), defined once, and the value encodings.

Column names and types are the data contract: add columns freely, never rename these.

Shard coordinates (``turn``, ``position``, ``iteration``, ``layer``) are int32 in the shards;
``iteration`` is 1-based, ``layer`` 0-based, ``position`` counts generated positions from 0 within a turn.
Hidden values are lossless: float32 as ``fixed_size_list<float32>[d]``; bfloat16 as its uint16 bit pattern
(little-endian) in ``fixed_size_binary[2d]``. The logical dtype is in the schema metadata key
``sst_interp.dtype``.

Sketch indices (``top_indices``, each in [0, d)) are ``fixed_size_list<uint16>[k]`` when d < 65,536 and
``fixed_size_list<int32>[k]`` otherwise; runs written before the narrowing hold int32 for any d and stay valid.
Readers get int32 either way (:func:`decode_fixed_list` widens exactly), so -1 can mark a missing cell.

Attention rows (``record --attention``) are one per (question, turn, position, iteration, layer, head): the keys the
query attended to (``key_positions``, each key's index in the row's own context) and their ``weights`` as
variable-length lists, and the ``remaining_mass`` the stored keys leave out (1 - their sum).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

SCHEMA_VERSION = 1
DTYPE_KEY = b"sst_interp.dtype"
HIDDEN_DTYPES = ("float32", "bfloat16")
KINDS = ("hidden", "logits", "sketch", "gates", "attention")
#: Sketch indices are stored as uint16 for hidden sizes below this (every index < d then fits in 16 bits).
UINT16_INDEX_LIMIT = 65536

_COORD = pa.int32()
#: The key columns of every per-layer shard (hidden, sketch, gates, attention), in order.
_LAYER_KEYS = [("question_id", pa.string()), ("turn", _COORD), ("position", _COORD), ("iteration", _COORD),
               ("layer", _COORD)]

QUESTIONS_SCHEMA = pa.schema(
    [
        ("question_id", pa.string()),
        ("source", pa.string()),
        ("prompt", pa.string()),
        ("reference", pa.string()),
        ("choices", pa.list_(pa.string())),
        ("metadata", pa.string()),
    ]
)

GENERATIONS_SCHEMA = pa.schema(
    [
        ("question_id", pa.string()),
        ("depth", pa.int64()),
        ("turn", pa.int64()),
        ("token_ids", pa.list_(pa.int32())),
        ("text", pa.string()),
        ("n_tokens", pa.int64()),
        ("stop_reason", pa.string()),
        ("extracted_answer", pa.string()),
        ("correct", pa.bool_()),
        ("grader", pa.string()),
        ("depth_policy", pa.string()),
        ("chosen_depth", pa.int64()),
    ]
)

#: One row per (question_id, depth) CodeACT episode (docs/format.md); ``stop_reason`` is one of
#: ``finish_session|no_code|max_turns|token_budget``.
EPISODES_SCHEMA = pa.schema(
    [
        ("question_id", pa.string()),
        ("depth", pa.int64()),
        ("n_turns", pa.int64()),
        ("stop_reason", pa.string()),
        ("final_answer", pa.string()),
        ("correct", pa.bool_()),
        ("grader", pa.string()),
        ("depth_policy", pa.string()),
        ("chosen_depth", pa.int64()),
    ]
)

#: Columns a CodeACT run's generations rows carry besides GENERATIONS_SCHEMA (one row per model turn).
CODEACT_GENERATION_COLUMNS = {"code": pa.string(), "tool_output": pa.string(), "tool_status": pa.string()}


def hidden_schema(d: int, dtype: str) -> pa.Schema:
    """Schema of ``hidden/depth=D/*.parquet`` for hidden size ``d`` and logical ``dtype``."""
    check_dtype(dtype)
    value_type = pa.list_(pa.float32(), d) if dtype == "float32" else pa.binary(2 * d)
    fields = [
        *_LAYER_KEYS,
        ("values", value_type),
    ]
    return pa.schema(fields, metadata={DTYPE_KEY: dtype.encode()})


def logits_schema(k: int) -> pa.Schema:
    """Schema of ``logits/depth=D/*.parquet`` with ``k`` = top-K."""
    return pa.schema(
        [
            ("question_id", pa.string()),
            ("turn", _COORD),
            ("position", _COORD),
            ("iteration", _COORD),
            ("argmax", pa.int32()),
            ("top_ids", pa.list_(pa.int32(), k)),
            ("top_logprobs", pa.list_(pa.float32(), k)),
            ("entropy", pa.float32()),
            ("tracked_logprobs", pa.list_(pa.float32(), k)),
        ]
    )


def sketch_index_type(hidden_size: int) -> pa.DataType:
    """The value type of ``top_indices`` for hidden size ``hidden_size``: uint16 when d < 65,536, else int32."""
    if hidden_size < 1:
        raise ValueError(f"hidden_size must be >= 1, got {hidden_size}")
    return pa.uint16() if hidden_size < UINT16_INDEX_LIMIT else pa.int32()


def sketch_schema(k: int, hidden_size: int) -> pa.Schema:
    """Schema of ``sketch/depth=D/*.parquet`` with ``k`` = sketch size (indices of the top-k |values|) and
    ``hidden_size`` = d, which picks the index type (:func:`sketch_index_type`)."""
    return pa.schema(
        [
            *_LAYER_KEYS,
            ("top_indices", pa.list_(sketch_index_type(hidden_size), k)),
        ]
    )


def gates_schema(with_sign_bits: bool) -> pa.Schema:
    """Schema of ``gates/depth=D/*.parquet``; ``sign_bits`` (numpy.packbits of gate > 0) is optional."""
    fields = [
        *_LAYER_KEYS,
        ("active_fraction", pa.float32()),
    ]
    if with_sign_bits:
        fields.append(("sign_bits", pa.binary()))
    return pa.schema(fields)


def attention_schema() -> pa.Schema:
    """Schema of ``attention/depth=D/*.parquet``: one row per (question, turn, position, iteration, layer, head),
    its keys' context indices and weights as variable-length lists (all keys, or the top-k by weight)."""
    return pa.schema(
        [
            *_LAYER_KEYS,
            ("head", _COORD),
            ("key_positions", pa.list_(pa.int32())),
            ("weights", pa.list_(pa.float32())),
            ("remaining_mass", pa.float32()),
        ]
    )


def check_dtype(dtype: str) -> None:
    """Raise ValueError unless ``dtype`` is a supported logical hidden dtype."""
    if dtype not in HIDDEN_DTYPES:
        raise ValueError(f"hidden dtype must be one of {HIDDEN_DTYPES}, got {dtype!r}")


# ---------------------------------------------------------------------------------------------- bfloat16 bits


def float32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round float32 ``values`` (any shape) to bfloat16 (round to nearest even, as torch) -> uint16 bit patterns.

    NaN stays NaN (quiet), inf stays inf. Only needed when a caller hands float32 to a bfloat16 run.
    """
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    rounded = ((bits + rounding) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():
        rounded[nan] = ((bits[nan] >> 16) | 0x0040).astype(np.uint16)
    return rounded


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """Widen uint16 bfloat16 bit patterns (any shape) to float32 exactly (every bf16 value is a float32)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


# ---------------------------------------------------------------------------------------------- encoding


def to_numpy(value: Any) -> np.ndarray:
    """Move a numpy array or torch tensor to a numpy array; a bfloat16 tensor becomes its uint16 bit patterns."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach"):  # a torch tensor; torch is imported only where tensors are passed
        tensor = value.detach()
        if str(tensor.dtype) == "torch.bfloat16":
            import torch

            return tensor.cpu().contiguous().view(torch.int16).numpy().view(np.uint16)
        return tensor.cpu().numpy()
    return np.asarray(value)


def hidden_values_array(values: Any, d: int, dtype: str) -> pa.Array:
    """Encode hidden ``values`` ([N, d]: float32, or uint16 bf16 bits / a bf16 tensor for bfloat16) as a column."""
    array = to_numpy(values)
    if array.ndim != 2 or array.shape[1] != d:
        raise ValueError(f"hidden values must be [N, {d}], got {array.shape}")
    if dtype == "float32":
        if array.dtype != np.float32:
            raise ValueError(f"a float32 run takes float32 hidden values, got {array.dtype}")
        flat = pa.array(np.ascontiguousarray(array).reshape(-1), type=pa.float32())
        return pa.FixedSizeListArray.from_arrays(flat, d)
    if array.dtype == np.float32:
        array = float32_to_bf16_bits(array)
    if array.dtype not in (np.uint16, np.int16):
        raise ValueError(f"a bfloat16 run takes uint16 bit patterns or bfloat16 tensors, got {array.dtype}")
    raw = np.ascontiguousarray(array).astype("<u2", copy=False).tobytes()
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(2 * d), len(array), [None, pa.py_buffer(raw)])


def decode_hidden_values(column: pa.Array | pa.ChunkedArray, d: int, dtype: str) -> np.ndarray:
    """Decode a hidden ``values`` column to float32 ``[N, d]`` (bfloat16 widened exactly)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    n = len(column)
    if dtype == "float32":
        flat = column.flatten().to_numpy(zero_copy_only=False)
        return np.asarray(flat, dtype=np.float32).reshape(n, d)
    data = column.buffers()[1]
    bits = np.frombuffer(data, dtype="<u2", count=n * d, offset=column.offset * 2 * d)
    return bf16_bits_to_float32(bits.reshape(n, d))


def decode_bf16_bits(column: pa.Array | pa.ChunkedArray, d: int) -> np.ndarray:
    """The raw uint16 bit patterns ``[N, d]`` of a bfloat16 hidden ``values`` column (no widening)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    bits = np.frombuffer(column.buffers()[1], dtype="<u2", count=len(column) * d, offset=column.offset * 2 * d)
    return bits.reshape(len(column), d).copy()


def fixed_list_array(values: Any, k: int, value_type: pa.DataType) -> pa.Array:
    """Encode ``values`` ([N, k]) as a fixed_size_list<value_type>[k] column."""
    array = to_numpy(values)
    if array.ndim != 2 or array.shape[1] != k:
        raise ValueError(f"expected [N, {k}] values, got {array.shape}")
    flat = pa.array(np.ascontiguousarray(array).reshape(-1).astype(value_type.to_pandas_dtype()), type=value_type)
    return pa.FixedSizeListArray.from_arrays(flat, k)


def sketch_indices_array(values: Any, k: int, hidden_size: int) -> pa.Array:
    """Encode sketch indices ``values`` ([N, k] ints, a numpy array or tensor) as ``top_indices`` in the type of
    :func:`sketch_index_type`. Raises ValueError when an index lies outside [0, hidden_size): narrowing to uint16
    would otherwise wrap it (-1 -> 65535) without a trace."""
    array = to_numpy(values)
    if array.ndim != 2 or array.shape[1] != k:
        raise ValueError(f"expected [N, {k}] sketch indices, got {array.shape}")
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"sketch indices must be integers, got {array.dtype}")
    if array.size and (int(array.min()) < 0 or int(array.max()) >= hidden_size):
        raise ValueError(f"sketch indices must lie in [0, {hidden_size}) (the run's hidden_size), got "
                         f"[{int(array.min())}, {int(array.max())}]")
    return fixed_list_array(array, k, sketch_index_type(hidden_size))


def decode_fixed_list(column: pa.Array | pa.ChunkedArray, dtype: np.dtype) -> np.ndarray:
    """Decode a fixed_size_list column to a numpy array ``[N, k]``."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    k = column.type.list_size
    return np.asarray(column.flatten().to_numpy(zero_copy_only=False), dtype=dtype).reshape(len(column), k)
