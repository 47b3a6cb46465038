"""Attention recording's cost against recording without it, side by side in one run.

Run: ``python bench/bench_attention.py [--model default|tiny|hops-organism|PATH] [--questions demo] [--depth 2]
[--batch 4] [--new-tokens 16] [--repeats 3] [--top-k 8]``

Three conditions record the same batch, interleaved repeat by repeat (so load drift hits all alike):

- ``record``: the recorder as ``record`` runs it (hidden states, sketches, per-iteration logits);
- ``+ attention all``: the same with ``--attention all`` (every layer and head, every key the query attends to);
- ``+ attention top-k``: the same with ``--attention all --attention-top-k K``.

Each timing is one batch recorded end to end: generation with the recorder attached, the writer columns built, the
batch written by a :class:`~sst_interp.store.RunWriter` (flushed, so the writer's encoding is counted). Printed: the
median CPU seconds per batch (the process's, the writer thread's included: other jobs on a shared machine move the
wall clock far more than they move this) and its ratio to ``record``, the median wall seconds and its ratio, and
the bytes each condition wrote per question (the
``attention/`` shards apart), then the size of the ``attention all`` run's shards under each candidate codec (the
choice in :data:`sst_interp.store.codecs.SHARD_CODECS` comes from it). SST backbones record through :class:`~sst_interp.hooks.Recorder`, looped families
(``hops-organism``, an HRM-Text folder) through :class:`~sst_interp.hooks.VisitRecorder`, as ``record`` does. On a
shared CPU machine run with OMP_NUM_THREADS=1: oversubscribed intra-op threads make timings erratic.
"""

from __future__ import annotations

import argparse
import io
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import torch

from sst_interp.checkpoints import resolve_model
from sst_interp.data import load_questions
from sst_interp.hooks import AttentionConfig, RecordConfig, Recorder, VisitRecorder
from sst_interp.model import GenerationConfig, SSTConfig, SSTModel, generate
from sst_interp.model.backbone import load_backbone
from sst_interp.model.loop_model import LoopModel, generate_looped, load_loop_backbone
from sst_interp.record.families import native_family
from sst_interp.store import RunWriter
from sst_interp.store.codecs import Codec, shard_codec

#: The codecs compared on the recorded attention shards.
CANDIDATES = (Codec("zstd", 1), Codec("zstd", 3), Codec("zstd", 1, {"key_positions": "DELTA_BINARY_PACKED"}),
              Codec("zstd", 1, {"weights": "BYTE_STREAM_SPLIT"}),
              Codec("zstd", 1, {"key_positions": "DELTA_BINARY_PACKED", "weights": "BYTE_STREAM_SPLIT"}),
              Codec("zstd", 3, {"weights": "BYTE_STREAM_SPLIT"}))


def build(model: str) -> tuple[Any, Any, Callable[..., Any]]:
    """(model, tokenizer, record(prompts, ids, config) -> writer columns) for ``model``: an SST on a backbone
    (``tiny``: a random 3-layer Gemma 3), or a looped family's folder."""
    folder = resolve_model(model)
    loop = native_family(folder) if model not in ("default", "tiny") else None
    if loop is not None:
        backbone, tokenizer = load_loop_backbone(folder, loop)
        looped = LoopModel(backbone, loop)

        def record_loop(prompts: list[list[int]], ids: list[str], config: RecordConfig, args: Any) -> dict:
            with VisitRecorder.for_model(looped, ids, config) as recorder:
                generate_looped(looped, prompts, args.depth, GenerationConfig(max_new_tokens=args.new_tokens),
                                observer=recorder)
            return recorder.columns()

        return looped, tokenizer, record_loop
    if model == "tiny":
        from sst_interp.model.testing import char_tokenizer, tiny_gemma3

        backbone, tokenizer = tiny_gemma3(dtype=torch.float32), char_tokenizer()
    else:
        backbone, tokenizer = load_backbone(folder, dtype="float32")
    sst = SSTModel.from_backbone(backbone, SSTConfig(state_scale="hidden"))

    def record_sst(prompts: list[list[int]], ids: list[str], config: RecordConfig, args: Any) -> dict:
        generation = GenerationConfig(max_new_tokens=args.new_tokens, logits_every_iteration=True)
        with Recorder.for_model(sst, ids, config) as recorder:
            generate(sst, prompts, args.depth, generation, observer=recorder)
        return recorder.columns()

    return sst, tokenizer, record_sst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--questions", default="demo")
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--full-positions", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top-k", type=int, default=8)
    args = parser.parse_args()

    model, tokenizer, record_batch = build(args.model)
    questions = load_questions(args.questions, limit=args.batch)
    prompts = [list(tokenizer(q.prompt).input_ids) for q in questions]
    base = dict(full_positions=args.full_positions, sketch_positions=64)
    conditions = {
        "record": RecordConfig(**base),
        "+ attention all": RecordConfig(**base, attention=AttentionConfig()),
        f"+ attention top-{args.top_k}": RecordConfig(**base, attention=AttentionConfig(top_k=args.top_k)),
    }
    extra = {"hidden_size": model.hidden_size, "num_layers": model.num_layers, "dtype": "float32", "top_k": 128,
             "sketch_k": RecordConfig().resolved_sketch_k(model.hidden_size)}
    root = Path(tempfile.mkdtemp(prefix="bench_attention_"))
    samples: dict[str, list[float]] = {name: [] for name in conditions}
    walls: dict[str, list[float]] = {name: [] for name in conditions}
    counter = iter(range(10**6))
    try:
        writers = {name: RunWriter.create_or_resume(root / f"run{i}", {"bench": name}, extra)
                   for i, name in enumerate(conditions)}
        for repeat in range(args.repeats + 1):  # the first round warms up and is not counted
            for name, config in conditions.items():
                ids = [f"{q.question_id}-{next(counter)}" for q in questions]
                started, wall = time.process_time(), time.perf_counter()
                columns = record_batch(prompts, ids, config, args)
                writers[name].submit(args.depth, ids, **columns)
                writers[name].flush()
                if repeat:
                    samples[name].append(time.process_time() - started)
                    walls[name].append(time.perf_counter() - wall)
        for writer in writers.values():
            writer.close()
        print(f"model {args.model} ({type(model).__name__}, {model.num_layers} recorded layers, d {model.hidden_size}); "
              f"{args.batch} questions x {args.new_tokens} new tokens at depth {args.depth}, {args.full_positions} "
              f"full positions; {args.repeats} repeats; torch threads {torch.get_num_threads()}; "
              f"{platform.processor() or platform.machine()}")
        reference, wall_reference = statistics.median(samples["record"]), statistics.median(walls["record"])
        questions_recorded = args.batch * (args.repeats + 1)
        print(f"{'condition':<22} {'CPU s / batch':>13} {'ratio':>6} {'wall s / batch':>14} {'ratio':>6} "
              f"{'KB / question':>14} {'of which attention':>19}")
        for i, name in enumerate(conditions):
            folder = root / f"run{i}"
            total = sum(f.stat().st_size for f in folder.rglob("*.parquet"))
            attention = sum(f.stat().st_size for f in (folder / "attention").rglob("*.parquet")) \
                if (folder / "attention").is_dir() else 0
            median, wall = statistics.median(samples[name]), statistics.median(walls[name])
            print(f"{name:<22} {median:>13.3f} {median / reference:>6.2f} {wall:>14.3f} {wall / wall_reference:>6.2f} "
                  f"{total / questions_recorded / 1e3:>14.1f} {attention / questions_recorded / 1e3:>19.1f}")
        compare_codecs(root / "run1" / "attention")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def compare_codecs(folder: Path) -> None:
    """Print the bytes of every attention shard under ``folder`` rewritten with each of :data:`CANDIDATES`."""
    table = pa.concat_tables([pq.read_table(f) for f in sorted(folder.rglob("*.parquet"))]).replace_schema_metadata(
        None)
    chosen = shard_codec("attention")
    print(f"attention shards ({table.num_rows} rows) under each codec:")
    for codec in CANDIDATES:
        sink = io.BytesIO()
        pq.write_table(table, sink, use_dictionary=["question_id"], **codec.writer_options(table.schema))
        print(f"  {codec.label():<66} {len(sink.getvalue()) / 1e3:9.1f} KB{'  (the store uses it)' * (codec == chosen)}")


if __name__ == "__main__":
    main()
