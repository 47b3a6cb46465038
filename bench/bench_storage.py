"""Benchmark: on-disk size and write/read throughput of each shard kind per Parquet codec, and the sketch bytes
per question with int32 (before) and uint16 (after) indices. Run by hand (not in CI), in ~10-20 s on one core:

    OMP_NUM_THREADS=1 taskset -c 1 python bench/bench_storage.py
    python bench/bench_storage.py --full-positions 4 --sketch-positions 16 --repeats 5 --workdir /tmp

Data, at the paper's shape (d = 5376, 62 layers, sketch k = round(d * 1024 / 5376) = 1024, logits top-K 128):
one question's depth-4 shards (iterations 1-4), built with the project's synthetic generator
(:mod:`sst_interp.synthetic`: hidden states with random signs and magnitudes; sketches are sorted windows of a
per-question permutation of the d dimensions) for ``--full-positions`` full and ``--sketch-positions`` sketch
positions, instead of the paper's 10 and 512, so it runs in seconds. Logits use full-precision log-probs drawn
here (the synthetic generator quantises them to 1/16, which would flatter every codec). Each shard goes through
the store's own path (``tables.build_shard_table`` + ``tables.write_shard``: row group per question, page CRCs,
sha256) and is read back with page-CRC checks (``integrity.read_row_group``), best of ``--repeats``. The
synthetic sketches move a few indices per iteration (as stable positions do), so rows of successive iterations
nearly repeat; ``sketch-random`` holds independent sorted random index sets instead, the case with no redundancy
between rows.

Per question is extrapolated from bytes and seconds per row to the rows one question has at the paper's shape
over depths 1-4 (iterations 1 + 2 + 3 + 4 = 10 per position): hidden 10 x 10 x 62 = 6,200 rows, sketch
512 x 10 x 62 = 317,440 rows, logits (10 + 512) x 10 = 5,220 rows (the recorder keeps logits at every recorded
position). Throughput is MB/s of the table's Arrow (in-memory) bytes. The default work directory is /dev/shm
(tmpfs, so the writer's fsync costs nothing and the figures are CPU: encoding, compression, hashing).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from sst_interp.store import integrity, tables
from sst_interp.store.codecs import SHARD_CODECS, Codec
from sst_interp.synthetic.arrays import hidden_cube, question_layout, sketch_rows
from sst_interp.synthetic.plan import plan_question
from sst_interp.synthetic.spec import SyntheticSpec

D, LAYERS, TOP_K, VOCAB = 5376, 62, 128, 262144
SKETCH_K = round(D * 1024 / 5376)
FULL_POSITIONS, SKETCH_POSITIONS, ITERATIONS = 10, 512, sum((1, 2, 3, 4))
#: Rows of one question at the paper's shape over depths 1-4.
ROWS_PER_QUESTION = {"hidden": FULL_POSITIONS * ITERATIONS * LAYERS,
                     "sketch": SKETCH_POSITIONS * ITERATIONS * LAYERS,
                     "logits": (FULL_POSITIONS + SKETCH_POSITIONS) * ITERATIONS}
#: What the writer used before this benchmark chose codecs: hidden uncompressed, everything else zstd (default
#: level), every column PLAIN, sketch indices int32.
OLD_CODECS = {"hidden": Codec("none"), "logits": Codec("zstd"), "sketch": Codec("zstd")}
LEVELS = [Codec("none"), Codec("snappy"), Codec("lz4"), Codec("zstd", 1), Codec("zstd", 3), Codec("zstd", 9)]


def _with(encodings: dict[str, str], *codecs: Codec) -> list[Codec]:
    return [Codec(c.compression, c.level, encodings) for c in codecs]


#: Candidates per table kind: every codec with PLAIN columns, and the encodings that suit the data (floats: byte
#: stream split; sorted indices: deltas) with the codecs that did well plain.
CANDIDATES: dict[str, list[Codec]] = {
    "hidden/float32": LEVELS + _with({"values": "BYTE_STREAM_SPLIT"}, Codec("lz4"), Codec("zstd", 1),
                                     Codec("zstd", 3)),
    "hidden/bfloat16": LEVELS + _with({"values": "BYTE_STREAM_SPLIT"}, Codec("zstd", 1)),
    "logits": LEVELS + _with({"top_logprobs": "BYTE_STREAM_SPLIT", "tracked_logprobs": "BYTE_STREAM_SPLIT"},
                             Codec("lz4"), Codec("zstd", 1), Codec("zstd", 3)),
    "sketch": LEVELS + _with({"top_indices": "DELTA_BINARY_PACKED"}, *LEVELS),
    "sketch-random": LEVELS + _with({"top_indices": "DELTA_BINARY_PACKED"}, *LEVELS),
}


@dataclass
class Measured:
    """One (table, codec) measurement.

    Args:
        file_bytes: size of the shard file; arrow_bytes: the table's in-memory bytes; rows: its rows.
        write_s, read_s: best wall time of one write (build excluded) and one CRC-checked read.
    """

    file_bytes: int
    arrow_bytes: int
    rows: int
    write_s: float
    read_s: float

    def per_question(self, kind: str) -> tuple[float, float, float]:
        """(MB, write s, read s) extrapolated to one question at the paper's shape (``kind``: a CANDIDATES key)."""
        scale = ROWS_PER_QUESTION[_base(kind)] / self.rows
        return self.file_bytes * scale / 1e6, self.write_s * scale, self.read_s * scale

    @property
    def write_mbs(self) -> float:
        """Write throughput, MB/s of Arrow data."""
        return self.arrow_bytes / self.write_s / 1e6

    @property
    def read_mbs(self) -> float:
        """Read throughput, MB/s of Arrow data."""
        return self.arrow_bytes / self.read_s / 1e6


def _base(kind: str) -> str:
    """``hidden/float32`` -> ``hidden``, ``sketch-random`` -> ``sketch``."""
    return kind.split("/")[0].split("-")[0]


# ---------------------------------------------------------------------------------------------- data


def _coords(qid: str, positions: np.ndarray, iterations: int, layers: int | None) -> dict[str, np.ndarray]:
    """Coordinate columns of every (position, iteration[, layer]) cell, C order: [P * I (* L)] each."""
    sizes = [positions.size, iterations] + ([layers] if layers else [])
    grid = [g.reshape(-1) for g in np.meshgrid(*[np.arange(s) for s in sizes], indexing="ij")]
    out = {"question_id": np.full(grid[0].size, qid), "turn": np.zeros(grid[0].size, np.int32),
           "position": positions[grid[0]].astype(np.int32), "iteration": (grid[1] + 1).astype(np.int32)}
    if layers:
        out["layer"] = grid[2].astype(np.int32)
    return out


def _logit_columns(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Full-precision logits columns for ``n`` rows: top-K ids of a 262k vocabulary, descending log-probs."""
    logits = np.sort(rng.gumbel(size=(n, TOP_K)) * 2.0, axis=1)[:, ::-1]
    norm = np.log(np.exp(logits).sum(axis=1, keepdims=True) + VOCAB * 0.05)
    top_logprobs = (logits - norm).astype(np.float32)
    tracked = (top_logprobs + rng.normal(scale=0.3, size=top_logprobs.shape)).astype(np.float32)
    top_ids = np.stack([rng.choice(VOCAB, TOP_K, replace=False) for _ in range(n)]).astype(np.int32)
    entropy = rng.uniform(0.5, 6.0, size=n).astype(np.float32)
    return {"argmax": top_ids[:, 0], "top_ids": top_ids, "top_logprobs": top_logprobs, "entropy": entropy,
            "tracked_logprobs": tracked}


def build_tables(full_positions: int, sketch_positions: int, logit_positions: int) -> dict[str, pa.Table]:
    """One question's depth-4 shard tables per kind: ``hidden/float32``, ``hidden/bfloat16``, ``logits``,
    ``sketch`` (uint16 indices, as the writer stores them at d = 5376), ``sketch-random`` (independent sorted random
    sets) and ``sketch-int32``, ``sketch-random-int32`` (the same with the old int32 type)."""
    spec = SyntheticSpec(n_questions=1, depths=(1, 2, 3, 4), full_positions=full_positions,
                         sketch_positions=sketch_positions, num_layers=LAYERS, hidden_size=D, top_k=TOP_K,
                         vocab_size=VOCAB, seed=0)
    plan = plan_question(spec, 0)
    layout = question_layout(spec, plan)
    qid = plan.question_id
    store_layout = {"hidden_size": D, "top_k": TOP_K, "sketch_k": SKETCH_K}
    cube = hidden_cube(spec, plan, layout)  # [P_full, 4, L, d] float32
    hidden = dict(_coords(qid, np.arange(full_positions), 4, LAYERS), values=cube.reshape(-1, D))
    sketch = dict(_coords(qid, np.arange(sketch_positions) + full_positions, 4, LAYERS),
                  top_indices=sketch_rows(spec, plan, layout, 4).reshape(-1, SKETCH_K))
    logit_cells = _coords(qid, np.arange(logit_positions), 4, None)
    logits = dict(logit_cells, **_logit_columns(len(logit_cells["position"]), np.random.default_rng(1)))
    out = {}
    for dtype in ("float32", "bfloat16"):
        out[f"hidden/{dtype}"], _ = tables.build_shard_table("hidden", hidden, [qid], dict(store_layout, dtype=dtype))
    out["logits"], _ = tables.build_shard_table("logits", logits, [qid], store_layout)
    out["sketch"], _ = tables.build_shard_table("sketch", sketch, [qid], store_layout)
    rng = np.random.default_rng(2)
    random_sets = np.sort(np.stack([rng.choice(D, SKETCH_K, replace=False) for _ in sketch["position"]]), axis=1)
    out["sketch-random"], _ = tables.build_shard_table("sketch", dict(sketch, top_indices=random_sets), [qid],
                                                       store_layout)
    old_type = pa.field("top_indices", pa.list_(pa.int32(), SKETCH_K))
    for kind in ("sketch", "sketch-random"):
        schema = out[kind].schema
        out[f"{kind}-int32"] = out[kind].cast(schema.set(schema.get_field_index("top_indices"), old_type))
    return out


# ---------------------------------------------------------------------------------------------- measuring


def _best(action: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(table: pa.Table, codec: Codec, folder: Path, repeats: int) -> Measured:
    """Write ``table`` as one shard with ``codec`` and read it back, best of ``repeats`` each; checks that the
    read returns exactly the written table (every choice must be lossless)."""
    target = folder / "shard.parquet"
    qid = table.column("question_id")[0].as_py()
    write_s = _best(lambda: tables.write_shard(table, [qid], target, codec), repeats)
    size = target.stat().st_size

    def read() -> pa.Table:
        return integrity.read_row_group(integrity.open_parquet(target), target, 0)

    read_s = _best(read, repeats)
    if not read().equals(table):
        raise AssertionError(f"{codec.label()} did not round-trip the table exactly")
    target.unlink()
    return Measured(size, table.nbytes, table.num_rows, write_s, read_s)


def _row(kind: str, codec: Codec, m: Measured, mark: str) -> str:
    mb, write_q, read_q = m.per_question(kind)
    return (f"| {kind} | {codec.label()}{mark} | {m.file_bytes / m.arrow_bytes:.3f} | {mb:,.1f} | "
            f"{m.write_mbs:,.0f} | {m.read_mbs:,.0f} | {write_q:.2f} | {read_q:.2f} |")


def sketch_before_after(built: dict[str, pa.Table], folder: Path, repeats: int) -> None:
    """Print (a): sketch bytes per question, int32 with the old codec vs uint16 with the old and the new codec."""
    old, new = OLD_CODECS["sketch"], SHARD_CODECS["sketch"]
    print("\n(a) sketch bytes per question (paper shape: 512 positions x 10 iterations x 62 layers x k=1024)")
    for kind, data in (("sketch", "synthetic sketches"), ("sketch-random", "independent random sets")):
        before = measure(built[f"{kind}-int32"], old, folder, repeats)
        mb_before = before.per_question(kind)[0]
        print(f"  {data}:")
        per_row = before.file_bytes / before.rows
        print(f"    {'before: int32,':<20}{old.label():<40} {mb_before:8,.1f} MB ({per_row:,.0f} B/row)")
        for label, codec in (("uint16, same codec", old), ("after:  uint16", new)):
            m = measure(built[kind], codec, folder, repeats)
            mb = m.per_question(kind)[0]
            print(f"    {label + ',':<20}{codec.label():<40} {mb:8,.1f} MB ({m.file_bytes / m.rows:,.0f} B/row, "
                  f"{mb / mb_before:.3f} x before)")
    print(f"  Arrow (in memory) per row: int32 {built['sketch-int32'].nbytes / built['sketch'].num_rows:,.0f} B, "
          f"uint16 {built['sketch'].nbytes / built['sketch'].num_rows:,.0f} B (Parquet stores both as INT32 "
          "physically, so the type alone leaves the file size unchanged)")


def codec_table(built: dict[str, pa.Table], folder: Path, repeats: int) -> dict[str, dict[str, float]]:
    """Print (b), the codec table per kind; returns ``{kind: {"before": MB, "after": MB}}`` per question with the
    writer's old and current codec."""
    print("\n(b) per table kind and codec: ratio = file / Arrow bytes; MB per question; throughput in MB/s of Arrow "
          "data; seconds per question. * = the writer's codec (SHARD_CODECS), o = the writer's codec before")
    print("| table | codec | ratio | MB/question | write MB/s | read MB/s | write s/q | read s/q |")
    print("|---|---|---|---|---|---|---|---|")
    totals: dict[str, dict[str, float]] = {}
    for kind, candidates in CANDIDATES.items():
        new, old = _writer_codec(kind), OLD_CODECS[_base(kind)]
        for codec in candidates + [c for c in (old, new) if c not in candidates]:
            m = measure(built[kind], codec, folder, repeats)
            print(_row(kind, codec, m, (" *" if codec == new else "") + (" o" if codec == old else "")))
            for name, chosen in (("before", old), ("after", new)):
                if codec == chosen:
                    totals.setdefault(kind, {})[name] = m.per_question(kind)[0]
    return totals


def _writer_codec(kind: str) -> Codec:
    """The writer's codec for a CANDIDATES key."""
    return SHARD_CODECS[kind if _base(kind) == "hidden" else _base(kind)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full-positions", type=int, default=2, help="full positions measured (paper: 10)")
    parser.add_argument("--sketch-positions", type=int, default=8, help="sketch positions measured (paper: 512)")
    parser.add_argument("--logit-positions", type=int, default=64, help="positions with logits measured")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many writes and reads")
    parser.add_argument("--workdir", default="/dev/shm" if Path("/dev/shm").is_dir() else None,
                        help="where shards are written (default /dev/shm: tmpfs, CPU cost only)")
    args = parser.parse_args(argv)

    built = build_tables(args.full_positions, args.sketch_positions, args.logit_positions)
    folder = Path(tempfile.mkdtemp(prefix="bench-storage-", dir=args.workdir))
    try:
        rows = ", ".join(f"{k} {t.num_rows}" for k, t in built.items() if not k.endswith("int32"))
        print(f"bench_storage: d={D}, layers={LAYERS}, sketch k={SKETCH_K}, top-K={TOP_K}; measured on 1 question x "
              f"depth 4 with {args.full_positions} full, {args.sketch_positions} sketch, {args.logit_positions} logit "
              f"positions (rows: {rows}); extrapolated per question to the paper's rows {ROWS_PER_QUESTION} over "
              f"depths 1-4; best of {args.repeats}; pyarrow {pa.__version__}; workdir {folder.parent}")
        sketch_before_after(built, folder, args.repeats)
        totals = codec_table(built, folder, args.repeats)
        print("\nper question at the paper's shape (hidden + logits + synthetic sketches), old writer -> this writer "
              "(old sketch bytes: uint16 with the old codec, the same size as int32, see (a)):")
        for dtype in ("float32", "bfloat16"):
            parts = (f"hidden/{dtype}", "logits", "sketch")
            old_total = sum(totals[k]["before"] for k in parts)
            new_total = sum(totals[k]["after"] for k in parts)
            print(f"  {dtype}: {old_total:,.0f} MB -> {new_total:,.0f} MB ({new_total / old_total:.3f} x)")
    finally:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
