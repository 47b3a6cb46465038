"""Schema column names/types and lossless value encodings (float32 and bfloat16 bit patterns)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from sst_interp.store import schema as sch


def test_hidden_schema_types_and_dtype_metadata() -> None:
    f32 = sch.hidden_schema(16, "float32")
    bf16 = sch.hidden_schema(16, "bfloat16")
    assert f32.names == ["question_id", "turn", "position", "iteration", "layer", "values"]
    assert f32.field("values").type == pa.list_(pa.float32(), 16)
    assert bf16.field("values").type == pa.binary(32)
    assert f32.metadata[sch.DTYPE_KEY] == b"float32"
    assert bf16.metadata[sch.DTYPE_KEY] == b"bfloat16"
    with pytest.raises(ValueError):
        sch.hidden_schema(16, "float16")


def test_design_columns_of_every_table() -> None:
    assert sch.QUESTIONS_SCHEMA.names == ["question_id", "source", "prompt", "reference", "choices", "metadata"]
    assert sch.GENERATIONS_SCHEMA.field("token_ids").type == pa.list_(pa.int32())
    assert sch.GENERATIONS_SCHEMA.field("correct").type == pa.bool_()
    logits = sch.logits_schema(128)
    assert logits.field("top_ids").type == pa.list_(pa.int32(), 128)
    assert logits.field("tracked_logprobs").type == pa.list_(pa.float32(), 128)
    assert logits.field("argmax").type == pa.int32() and logits.field("entropy").type == pa.float32()
    assert sch.sketch_schema(1024, 5376).field("top_indices").type == pa.list_(pa.uint16(), 1024)
    assert sch.sketch_schema(1024, 65536).field("top_indices").type == pa.list_(pa.int32(), 1024)
    assert sch.gates_schema(True).field("sign_bits").type == pa.binary()
    assert "sign_bits" not in sch.gates_schema(False).names


def _special_bf16_bits() -> np.ndarray:
    """Every class of bf16 bit pattern: zeros, subnormals, normals, max, inf, quiet and signalling NaNs."""
    patterns = [0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x3F80, 0xBF80, 0x7F7F, 0xFF7F,
                0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0x7FFF, 0xFFFF, 0x1234]
    rng = np.random.default_rng(1)
    return np.concatenate([np.array(patterns, dtype=np.uint16), rng.integers(0, 2**16, 4096 - len(patterns),
                                                                             dtype=np.uint16)])


def test_bf16_bits_round_trip_through_parquet_is_bit_exact(tmp_path) -> None:
    d = 64
    bits = _special_bf16_bits().reshape(-1, d)
    column = sch.hidden_values_array(bits, d, "bfloat16")
    table = pa.table({"values": column})
    pq.write_table(table, tmp_path / "x.parquet")
    back = pq.read_table(tmp_path / "x.parquet").column("values")
    assert np.array_equal(sch.decode_bf16_bits(back, d), bits)
    widened = sch.decode_hidden_values(back, d, "bfloat16")
    # widening equals torch's own bf16 -> float32 conversion, bit for bit (NaN payloads included)
    expected = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).float().numpy()
    assert np.array_equal(widened.view(np.uint32), expected.view(np.uint32))
    assert np.array_equal((widened.view(np.uint32) >> 16).astype(np.uint16), bits)


def test_bf16_tensor_is_stored_as_its_bits() -> None:
    tensor = torch.tensor([[1.0, -2.5, float("inf"), 1e-40]], dtype=torch.bfloat16)
    array = sch.to_numpy(tensor)
    assert array.dtype == np.uint16
    assert array.tolist() == [[0x3F80, 0xC020, 0x7F80, int(tensor.view(torch.int16)[0, 3]) & 0xFFFF]]


def test_float32_to_bf16_rounding_matches_torch() -> None:
    rng = np.random.default_rng(2)
    values = np.concatenate([rng.standard_normal(5000).astype(np.float32) * 10.0 ** rng.integers(-40, 38, 5000),
                             np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 3.4e38, 1e-45], dtype=np.float32)])
    values = values.astype(np.float32)
    ours = sch.float32_to_bf16_bits(values)
    theirs = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    finite = ~np.isnan(values)
    assert np.array_equal(ours[finite], theirs[finite])
    assert np.isnan(sch.bf16_bits_to_float32(ours[~finite])).all()


def test_float32_round_trip_is_bit_exact_including_specials(tmp_path) -> None:
    d = 8
    values = np.array([[0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-40, 3.4028235e38]], dtype=np.float32)
    values = np.concatenate([values, np.random.default_rng(3).standard_normal((5, d)).astype(np.float32)])
    values[2, 3] = np.frombuffer(np.uint32(0x7FA00001).tobytes(), dtype=np.float32)[0]  # a NaN with a payload
    pq.write_table(pa.table({"values": sch.hidden_values_array(values, d, "float32")}), tmp_path / "y.parquet")
    back = sch.decode_hidden_values(pq.read_table(tmp_path / "y.parquet").column("values"), d, "float32")
    assert np.array_equal(back.view(np.uint32), values.view(np.uint32))


def test_wrong_shapes_and_dtypes_are_refused() -> None:
    with pytest.raises(ValueError):
        sch.hidden_values_array(np.zeros((2, 5), np.float32), 4, "float32")
    with pytest.raises(ValueError):
        sch.hidden_values_array(np.zeros((2, 4), np.float64), 4, "float32")
    with pytest.raises(ValueError):
        sch.hidden_values_array(np.zeros((2, 4), np.int64), 4, "bfloat16")
