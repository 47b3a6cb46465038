"""Recording overhead and writer throughput, measured side by side in one run.

Run: ``python bench/bench_record.py [--model default|tiny|PATH] [--depth 2] [--batch 4] [--new-tokens 32]``

Printed:

- ``generate``: s per batch of :func:`sst_interp.model.generate` at depth k with the LM head after every iteration
  (the same generation ``record`` runs), no observer;
- ``generate, head last only``: the same with the LM head after the last iteration only; the ratio
  ``head every iteration / head last`` is the LM-head extra, reported separately (the project's performance targets);
- ``record``: the same generation with the :class:`~sst_interp.hooks.Recorder` attached and each batch submitted
  to one :class:`~sst_interp.store.RunWriter`, as ``record`` does (hooks, device copies, sketches, logit
  summaries; the writer thread encodes and writes while the next batch generates, and the wait for the last
  batch is added), and the ratio ``record / generate`` over all repeats (the recording overhead);
- writer throughput in MB/s: batches of recorded-size hidden states (float32 and bfloat16) written by RunWriter,
  and the bytes the recorded runs wrote per second of recording.

Runs are interleaved (generate, head-last, record, generate, ...) so load drift hits all alike. On a shared CPU
machine run with OMP_NUM_THREADS=1: oversubscribed intra-op threads make timings erratic.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from sst_interp.data import load_questions
from sst_interp.hooks import RecordConfig, Recorder
from sst_interp.model import GenerationConfig, SSTConfig, SSTModel, generate
from sst_interp.model.backbone import load_backbone
from sst_interp.store import RunWriter


def build(model: str, dtype: str):
    """(sst, tokenizer) for ``model``: ``tiny`` is a random 3-layer Gemma 3 with a character tokenizer."""
    if model == "tiny":
        from sst_interp.model.testing import char_tokenizer, tiny_gemma3

        backbone, tokenizer = tiny_gemma3(dtype=getattr(torch, dtype)), char_tokenizer()
    else:
        backbone, tokenizer = load_backbone(model, dtype=dtype)
    return SSTModel.from_backbone(backbone, SSTConfig(state_scale="hidden")), tokenizer


def bench_recording(sst, tokenizer, args) -> dict[str, float]:
    questions = load_questions("demo", limit=args.batch)
    prompts = [tokenizer(q.prompt).input_ids for q in questions]
    every = GenerationConfig(max_new_tokens=args.new_tokens, logits_every_iteration=True)
    last = GenerationConfig(max_new_tokens=args.new_tokens, logits_every_iteration=False)
    config = RecordConfig(full_positions=args.full_positions, sketch_positions=args.sketch_positions,
                          dtype=args.dtype)
    extra = {"hidden_size": sst.hidden_size, "num_layers": sst.num_layers, "dtype": args.dtype}
    root = Path(tempfile.mkdtemp(prefix="bench_record_"))
    counter = iter(range(10**6))

    def run_generate() -> None:
        generate(sst, prompts, args.depth, every)

    def run_head_last() -> None:
        generate(sst, prompts, args.depth, last)

    def run_record(writer: RunWriter) -> None:
        # as record does it: the writer thread encodes and writes while the next batch generates
        ids = [f"{q.question_id}-{next(counter)}" for q in questions]
        with Recorder.for_model(sst, ids, config) as recorder:
            generate(sst, prompts, args.depth, every, observer=recorder)
        writer.submit(args.depth, ids, **recorder.columns())

    samples: dict[str, list[float]] = {"generate": [], "head_last": [], "record": []}
    try:
        with RunWriter.create_or_resume(root / "run", {"bench": True}, extra) as writer:
            run_generate(), run_head_last(), run_record(writer)  # warm-up
            writer.flush()
            written_before = writer.bytes_written
            for _ in range(args.repeats):
                for name, fn in (("generate", run_generate), ("head_last", run_head_last),
                                 ("record", lambda: run_record(writer))):
                    start = time.perf_counter()
                    fn()
                    samples[name].append(time.perf_counter() - start)
            start = time.perf_counter()
            writer.flush()  # what is still queued after the last batch counts against recording
            drain = time.perf_counter() - start
            written = writer.bytes_written - written_before
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {name: statistics.median(values) for name, values in samples.items()}
    record_total = sum(samples["record"]) + drain
    result["record_amortised"] = record_total / args.repeats
    result["record_ratio"] = record_total / sum(samples["generate"])
    result["record_mb_per_s"] = written / 1e6 / record_total
    return result


def bench_writer(d: int, layers: int, args) -> dict[str, float]:
    """MB/s of RunWriter on hidden-state batches shaped like a recording (rows = batch x positions x depth x L)."""
    rows_per_question = args.full_positions * args.depth * layers
    rng = np.random.default_rng(0)
    grid = np.array([(p, i, layer) for p in range(args.full_positions) for i in range(1, args.depth + 1)
                     for layer in range(layers)])
    out = {}
    for dtype in ("float32", "bfloat16"):
        root = Path(tempfile.mkdtemp(prefix="bench_writer_"))
        values = torch.from_numpy(rng.standard_normal((args.batch * rows_per_question, d), dtype=np.float32))
        if dtype == "bfloat16":
            values = values.to(torch.bfloat16)
        try:
            start = time.perf_counter()
            with RunWriter.create_or_resume(root / "run", {"bench": True},
                                            {"hidden_size": d, "num_layers": layers, "dtype": dtype}) as writer:
                for batch in range(args.writer_batches):
                    qids = [f"b{batch}q{i}" for i in range(args.batch)]
                    writer.submit(args.depth, qids, hidden={
                        "question_id": np.repeat(qids, rows_per_question), "turn": np.zeros(len(values)),
                        "position": np.tile(grid[:, 0], args.batch), "iteration": np.tile(grid[:, 1], args.batch),
                        "layer": np.tile(grid[:, 2], args.batch), "values": values})
            seconds = time.perf_counter() - start
            payload = values.numel() * values.element_size() * args.writer_batches
            out[dtype] = payload / 1e6 / seconds
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default", help="default | tiny | local HF folder")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--full-positions", type=int, default=10)
    parser.add_argument("--sketch-positions", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--writer-batches", type=int, default=8)
    args = parser.parse_args()
    sst, tokenizer = build(args.model, args.dtype)
    print(f"model {args.model} (L={sst.num_layers}, d={sst.hidden_size}, {args.dtype}), torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; depth {args.depth}, batch {args.batch}, {args.new_tokens} new tokens, "
          f"full {args.full_positions} + sketch {args.sketch_positions} positions; median of {args.repeats}")
    timing = bench_recording(sst, tokenizer, args)
    print(f"generate (head every iteration): {timing['generate']:.3f} s/batch")
    print(f"generate (head last only):       {timing['head_last']:.3f} s/batch  "
          f"LM-head extra ratio {timing['generate'] / timing['head_last']:.3f}")
    print(f"record (hooks + writer):         {timing['record_amortised']:.3f} s/batch (median "
          f"{timing['record']:.3f})  overhead ratio record/generate {timing['record_ratio']:.3f}")
    print(f"bytes written while recording:   {timing['record_mb_per_s']:.1f} MB/s")
    for dtype, rate in bench_writer(sst.hidden_size, sst.num_layers, args).items():
        print(f"writer throughput ({dtype} hidden): {rate:.1f} MB/s")


if __name__ == "__main__":
    main()
