"""The writer compresses and encodes each shard kind as SHARD_CODECS says (read back from the Parquet footer), the
codecs stay lossless (bfloat16 bits included), and a malformed codec is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sst_interp.store import Run, RunWriter
from sst_interp.store.codecs import SHARD_CODECS, Codec, shard_codec
from tests.unit.store.conftest import IDENTITY, extra, make_batch

KINDS = ("hidden", "logits", "sketch", "gates")
LAYERS_BF16 = 4
#: Parquet's names of pyarrow's codecs in a footer (pyarrow writes lz4 as LZ4_RAW).
FOOTER_NAMES = {"none": {"UNCOMPRESSED"}, "snappy": {"SNAPPY"}, "lz4": {"LZ4", "LZ4_RAW"}, "zstd": {"ZSTD"}}


def _write(path: Path, dtype: str) -> Path:
    with RunWriter.create_or_resume(path, IDENTITY, extra(dtype)) as writer:
        writer.submit(1, ["a", "b"], **make_batch(["a", "b"], 1))
    return path


def _chunks(target: Path) -> dict[str, pq.ColumnChunkMetaData]:
    """Column chunks of row group 0 by top-level column name (a list column's values chunk under its name)."""
    meta = pq.ParquetFile(target).metadata
    group = meta.row_group(0)
    return {group.column(i).path_in_schema.split(".")[0]: group.column(i) for i in range(meta.num_columns)}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_every_shard_is_written_with_its_kinds_codec(tmp_path, dtype) -> None:
    path = _write(tmp_path / "run", dtype)
    for kind in KINDS:
        (target,) = (path / kind / "depth=1").glob("*.parquet")
        codec = shard_codec(kind, dtype)
        assert codec is SHARD_CODECS[f"hidden/{dtype}" if kind == "hidden" else kind]
        chunks = _chunks(target)
        for name, chunk in chunks.items():
            assert chunk.compression in FOOTER_NAMES[codec.compression], (kind, name, chunk.compression)
            encoding = codec.encodings.get(name)
            if encoding is not None:
                assert encoding in chunk.encodings, (kind, name, chunk.encodings)
            elif name != "question_id":  # dictionary-encoded; everything else is PLAIN unless the codec says
                assert "PLAIN" in chunk.encodings and not {"BYTE_STREAM_SPLIT", "DELTA_BINARY_PACKED"} & set(
                    chunk.encodings), (kind, name, chunk.encodings)


def test_the_mapping_encodes_what_the_benchmark_chose() -> None:
    # bench/bench_storage.py: these encodings are what made zstd pay off (see the comment on SHARD_CODECS)
    assert SHARD_CODECS["sketch"].encodings == {"top_indices": "DELTA_BINARY_PACKED"}
    assert SHARD_CODECS["hidden/float32"].encodings == {"values": "BYTE_STREAM_SPLIT"}
    assert {c.compression for c in SHARD_CODECS.values()} == {"zstd"}


def test_every_bfloat16_bit_pattern_survives_the_writer(tmp_path) -> None:
    import torch

    d = 256
    bits = np.arange(2 ** 16, dtype=np.uint16).reshape(-1, d)  # 256 rows: every bf16 pattern once (NaNs included)
    n = len(bits)
    hidden = {"question_id": np.array(["a"] * n), "turn": np.zeros(n), "position": np.arange(n) // LAYERS_BF16,
              "iteration": np.ones(n), "layer": np.arange(n) % LAYERS_BF16,
              "values": torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)}
    settings = dict(extra("bfloat16"), hidden_size=d, num_layers=LAYERS_BF16)
    with RunWriter.create_or_resume(tmp_path / "run", IDENTITY, settings) as writer:
        writer.submit(1, ["a"], hidden=hidden)
    (target,) = (tmp_path / "run" / "hidden" / "depth=1").glob("*.parquet")
    assert _chunks(target)["values"].compression in FOOTER_NAMES[SHARD_CODECS["hidden/bfloat16"].compression]
    (block,) = Run.open(tmp_path / "run").hidden(1)
    got = (block.values.reshape(n, d).view(np.uint32) >> 16).astype(np.uint16)  # [P, I=1, L, d] in row order
    np.testing.assert_array_equal(got, bits)


def test_a_malformed_codec_is_refused() -> None:
    with pytest.raises(ValueError, match="compression"):
        Codec("gzip")
    with pytest.raises(ValueError, match="level"):
        Codec("lz4", 3)
    with pytest.raises(ValueError, match="encodings"):
        Codec("zstd", encodings={"values": "RLE_DICTIONARY"})
    schema = pa.schema([("values", pa.list_(pa.float32(), 4))])
    with pytest.raises(ValueError, match="'top_indices'"):
        Codec("zstd", encodings={"top_indices": "DELTA_BINARY_PACKED"}).writer_options(schema)
    with pytest.raises(ValueError, match="no codec"):
        shard_codec("hidden", "float16")


def test_writer_options_name_the_values_of_a_list_column() -> None:
    schema = pa.schema([("top_indices", pa.list_(pa.uint16(), 4)), ("entropy", pa.float32())])
    codec = Codec("zstd", 1, {"top_indices": "DELTA_BINARY_PACKED", "entropy": "BYTE_STREAM_SPLIT"})
    assert codec.writer_options(schema) == {
        "compression": "zstd", "compression_level": 1,
        "column_encoding": {"top_indices.list.element": "DELTA_BINARY_PACKED", "entropy": "BYTE_STREAM_SPLIT"}}
