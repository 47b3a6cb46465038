"""How each kind of shard is compressed and encoded in Parquet: one mapping, chosen by measurement.

The figures behind :data:`SHARD_CODECS` come from ``python bench/bench_storage.py`` (see its docstring for the
data and the machine); rerun it before changing the mapping. Every choice is lossless, so bfloat16 bit patterns
and sketch indices round-trip exactly whatever the codec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pyarrow as pa

#: Parquet codecs pyarrow writes that the store accepts (brotli and gzip are slower than zstd at equal size).
COMPRESSIONS = ("none", "snappy", "lz4", "zstd")
#: Column encodings the store uses (dictionary encoding stays on question_id only, set by the shard writer).
ENCODINGS = ("PLAIN", "BYTE_STREAM_SPLIT", "DELTA_BINARY_PACKED")


@dataclass(frozen=True)
class Codec:
    """The Parquet compression and column encodings of one kind of shard.

    Args:
        compression: page compression, one of :data:`COMPRESSIONS`.
        level: compression level (zstd: 1-22); None for the codec's default.
        encodings: ``{column name: encoding}`` for columns that should not be PLAIN; a list column's encoding
            applies to its values.
    """

    compression: str
    level: int | None = None
    encodings: Mapping[str, str] = field(default_factory=dict, hash=False)  # a dict: hashing skips it

    def __post_init__(self) -> None:
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {COMPRESSIONS}, got {self.compression!r}")
        if self.level is not None and self.compression != "zstd":
            raise ValueError(f"a compression level is only used with zstd, not {self.compression!r}")
        unknown = {e for e in self.encodings.values() if e not in ENCODINGS}
        if unknown:
            raise ValueError(f"encodings must be among {ENCODINGS}, got {sorted(unknown)}")

    def label(self) -> str:
        """Short name for tables, e.g. ``zstd-1 + DELTA_BINARY_PACKED(top_indices)``."""
        name = self.compression if self.level is None else f"{self.compression}-{self.level}"
        extra = [f"{enc}({col})" for col, enc in sorted(self.encodings.items()) if enc != "PLAIN"]
        return " + ".join([name, *extra])

    def writer_options(self, schema: pa.Schema) -> dict[str, Any]:
        """Keyword arguments for :class:`pyarrow.parquet.ParquetWriter` writing a table of ``schema``.

        Parquet names the values of a list column ``<name>.list.element``; an encoding given for a name that
        is not in ``schema`` is a ValueError (pyarrow would ignore a path that matches no leaf column).
        """
        options: dict[str, Any] = {"compression": self.compression}
        if self.level is not None:
            options["compression_level"] = self.level
        paths = {}
        for name, encoding in self.encodings.items():
            index = schema.get_field_index(name)
            if index < 0:
                raise ValueError(f"encoding given for column {name!r}, which the table lacks ({schema.names})")
            paths[_leaf_path(name, schema.field(index).type)] = encoding
        if paths:
            options["column_encoding"] = paths
        return options


def _leaf_path(name: str, value_type: pa.DataType) -> str:
    listy = pa.types.is_list(value_type) or pa.types.is_large_list(value_type) or \
        pa.types.is_fixed_size_list(value_type)
    return f"{name}.list.element" if listy else name


# Chosen from `python bench/bench_storage.py` (synthetic data at the paper's shape: d = 5376, 62 layers, k = 1024;
# one core of a 2-core machine shared with a training job, so throughputs varied by up to ~30% over four runs,
# quoted as ranges; sizes are exact). Sizes are per question over depths 1-4; "old" is what the writer used
# before: hidden uncompressed, everything else zstd (level 1, pyarrow's default), every column PLAIN, int32 sketch
# indices.
# Parquet stores uint16 as physical INT32, so uint16 sketches alone change nothing on disk; the delta encoding does.
SHARD_CODECS: Mapping[str, Codec] = MappingProxyType({
    # 0.849 of raw (113.3 vs 133.5 MB), write 148-196 vs 221-248 MB/s, read 288-458 vs 343-546 MB/s uncompressed.
    # zstd alone gives only 0.928 and reads slower (297-351): byte stream split puts the exponent bytes together.
    "hidden/float32": Codec("zstd", 1, {"values": "BYTE_STREAM_SPLIT"}),
    # 0.785 (52.5 vs 66.8 MB), write 222-352 vs 335-432 MB/s, read 412-591 vs 912-1,451 MB/s: 21% less disk for
    # ~0.1 s more CPU per question read. zstd-3 is no smaller; byte stream split + zstd-1 is (0.675) but reads at
    # 222-262 MB/s, too slow for the table the analyses read most. lz4 and snappy do not compress it (1.00).
    "hidden/bfloat16": Codec("zstd", 1),
    # 0.746 (6.1 vs 6.7 MB with the old zstd) at the old zstd's throughput within the noise (write 108-168 vs
    # 133-155, read 272-356 vs 264-308 MB/s); zstd-3 saves 0.2 MB more with slower writes (96-117 MB/s). Logits
    # are ~3% of a run's bytes.
    "logits": Codec("zstd", 1, {"top_logprobs": "BYTE_STREAM_SPLIT", "tracked_logprobs": "BYTE_STREAM_SPLIT"}),
    # Sorted indices as deltas (~6 bits each), then zstd, which also finds the rows repeated across iterations.
    # Synthetic sketches (a few indices move per iteration, as at stable positions): 52.9 MB vs 109.1 old, vs 75.5
    # with zstd-1. Independent random sets (no repetition, the worst case): 209.5 MB vs 555.2 old, vs 221.5 with
    # zstd-1. Writes 5.3-6.6 s/question (synthetic) and 7.0-9.8 (random) against the old 4.9-5.4 and 9.3-10.0
    # (zstd-1 + deltas: 4.9-6.6 and 4.6-7.1); reads 2.5-2.7 and 2.8-3.6 against the old 2.5-2.7 and 3.5-3.7.
    # zstd-9 saves 6% more but writes at about half the speed. A question at paper scale takes 5,220 decoder
    # passes of the model to record, far longer than these seconds in the background writer, so the bytes decide.
    "sketch": Codec("zstd", 3, {"top_indices": "DELTA_BINARY_PACKED"}),
    # Not measured (the synthetic generator writes no gates); kept as before.
    "gates": Codec("zstd"),
    # From bench/bench_attention.py (bench/results/attention.log): the weights with their bytes split by
    # significance, then zstd-1: 514.9 KB against 579.4 with zstd-1 alone on the default backbone's shards (111.3
    # against 122.3 on hops-organism's); zstd-3 is no smaller (514.8, 111.6), and delta-encoding the key positions
    # makes them larger (527.5, 111.5): zstd already finds the runs 0, 1, 2, ... of an all-keys row.
    "attention": Codec("zstd", 1, {"weights": "BYTE_STREAM_SPLIT"}),
})


def shard_codec(kind: str, dtype: str | None = None) -> Codec:
    """The codec the writer uses for a ``kind`` shard (``dtype``: the run's hidden dtype, used for hidden)."""
    key = f"hidden/{dtype}" if kind == "hidden" else kind
    try:
        return SHARD_CODECS[key]
    except KeyError:
        raise ValueError(f"no codec for shard kind {key!r}; known: {sorted(SHARD_CODECS)}") from None
