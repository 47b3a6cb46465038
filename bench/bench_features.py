"""Benchmark: how fast dictionary training reads a run's states, against the read floor, and how fast it trains.

    OMP_NUM_THREADS=1 python bench/bench_features.py                          # a planted run written here
    python bench/bench_features.py --run runs/hops-train --layer 1            # a recorded run
    python bench/bench_features.py --device cuda --hidden-size 640 --width 5120 --k 64

Rows per second, side by side (best of ``--repeats`` for the reads):

- ``floor: values``: the hidden shards of the depth read with pyarrow, the ``values`` column only (no coordinates,
  no CRC checks): what no reader of this format can beat;
- ``floor: files``: every column of the same files with page CRCs checked, as every read of this package does
  (a reader needs the coordinates to pick the site's rows);
- ``stream``: :meth:`~sst_interp.store.reader.Run.hidden_rows` narrowed to the site (layer, every iteration), the
  reader the training uses (rows of the files it reads per second, and the site's rows);
- ``batches``: :class:`~sst_interp.features.batches.StateBatches` with a buffer smaller than the site, so every
  pass rereads the shards (shuffling included);
- ``train: compute``: SAELens' ``SAETrainer`` on batches already in memory on the device (the trainer alone);
- ``train: from the run``: ``train_dictionaries`` (shared layout) end to end: stream, trainer, save.

Without ``--run`` a planted run is written first with the project's synthetic generator
(:func:`sst_interp.synthetic.write_synthetic_run`) under ``--workdir`` (``--questions`` x ``--positions`` positions
x iterations 1..``--depth`` x ``--layers`` layers of width ``--hidden-size``).
"""

from __future__ import annotations

import os

os.environ.setdefault("TQDM_DISABLE", "1")  # before tqdm is imported: it reads the variable once, at import

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import torch
from sae_lens.training.sae_trainer import SAETrainer

from sst_interp.features.architectures import trainer_config, training_sae
from sst_interp.features.batches import StateBatches
from sst_interp.features.options import TrainOptions
from sst_interp.features.sites import resolve_site
from sst_interp.features.states import Split
from sst_interp.features.train import train_dictionaries
from sst_interp.model.devices import check_device
from sst_interp.store import Run, integrity
from sst_interp.synthetic import SyntheticSpec, write_synthetic_run


def best(repeats: int, work: Callable[[], int]) -> tuple[float, int]:
    """(the fastest of ``repeats`` runs of ``work`` in seconds, the rows it returned)."""
    times, rows = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        rows = work()
        times.append(time.perf_counter() - start)
    return min(times), rows


def planted_run(folder: Path, args: argparse.Namespace) -> Path:
    spec = SyntheticSpec(n_questions=args.questions, depths=(args.depth,), full_positions=args.positions,
                         sketch_positions=0, num_layers=args.layers, hidden_size=args.hidden_size, top_k=4,
                         batch_questions=64, halting_dims=(), seed=0)
    write_synthetic_run(folder, spec)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, help="a recorded run (default: write a planted one)")
    parser.add_argument("--layer", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--questions", type=int, default=2000)
    parser.add_argument("--positions", type=int, default=4)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--width", type=int, default=None, help="features (default 8 x d)")
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/dev/shm") if Path("/dev/shm").is_dir() else None)
    args = parser.parse_args()
    device = check_device(args.device)
    work = Path(tempfile.mkdtemp(prefix="bench-features-", dir=args.workdir))
    try:
        start = time.perf_counter()
        path = args.run or planted_run(work / "run", args)
        written = time.perf_counter() - start
        run = Run.open(path)
        site = resolve_site(run, args.layer)
        files = sorted((run.path / "hidden" / f"depth={site.depth}").glob("*.parquet"))
        size = sum(f.stat().st_size for f in files)
        width = args.width or 8 * run.hidden_size
        print(f"run {path} ({'written in %.1f s' % written if args.run is None else 'given'}): d = {run.hidden_size}, "
              f"{len(files)} shard files, {size / 1e6:.1f} MB at depth {site.depth}; site {site.describe()}; "
              f"device {device}, torch threads {torch.get_num_threads()}")

        def values_only() -> int:
            return sum(pq.ParquetFile(f).read(columns=["values"]).num_rows for f in files)

        def whole_files() -> int:
            return sum(integrity.read_file(f).num_rows for f in files)

        def stream() -> int:
            return sum(len(chunk) for chunk in run.hidden_rows(site.depth, layers=[site.layer],
                                                                iterations=site.iterations))

        floor_values, file_rows = best(args.repeats, values_only)
        floor_files, _ = best(args.repeats, whole_files)
        streamed, site_rows = best(args.repeats, stream)
        batches = StateBatches(run, site, site.iterations, Split(), args.batch_size,
                               buffer=max(args.batch_size, site_rows // 4), seed=0)
        n_batches = max(1, 2 * site_rows // args.batch_size)  # two passes, each rereading the shards
        start = time.perf_counter()
        for _ in range(n_batches):
            next(batches)
        batched = time.perf_counter() - start

        torch.manual_seed(0)
        sae = training_sae("topk", run.hidden_size, width, args.k, 1.0, device)
        resident = torch.randn(args.batch_size, run.hidden_size, device=device)

        def endless():
            while True:
                yield resident

        SAETrainer(trainer_config(5, args.batch_size, 1e-3, device), training_sae(
            "topk", run.hidden_size, width, args.k, 1.0, device), endless()).fit()  # warm-up (kernels, allocator)
        trainer = SAETrainer(trainer_config(args.steps, args.batch_size, 1e-3, device), sae, endless())
        start = time.perf_counter()
        trainer.fit()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        compute = time.perf_counter() - start
        samples = args.steps * args.batch_size
        # the norm estimate reads min(50, steps) batches before the steps: counted as samples the trainer handled
        handled = samples + min(50, args.steps) * args.batch_size

        start = time.perf_counter()
        train_dictionaries(TrainOptions(run=run.path, layer=site.layer, layout="shared", width=width, k=args.k,
                                        steps=args.steps, batch_size=args.batch_size, device=device, holdout=0.0,
                                        out=work / "dictionary"))
        end_to_end = time.perf_counter() - start

        rows = [
            ("floor: values (pyarrow, no CRC)", file_rows / floor_values, "file rows", 1.0),
            ("floor: files (every column, CRC)", file_rows / floor_files, "file rows", floor_values / floor_files),
            ("stream: Run.hidden_rows at the site", file_rows / streamed, "file rows", floor_values / streamed),
            ("  the same, the site's rows", site_rows / streamed, "site rows", None),
            ("batches: StateBatches, rereading", n_batches * args.batch_size / batched, "site rows", None),
            ("train: compute (SAETrainer, in memory)", handled / compute, "samples", None),
            ("train: from the run (end to end)", (samples + min(50, args.steps) * args.batch_size) / end_to_end,
             "samples", None),
        ]
        print(f"{'what':42s} {'rows/s':>12s}  {'counted':10s} {'of floor':>8s}")
        for name, rate, unit, ratio in rows:
            print(f"{name:42s} {rate:12,.0f}  {unit:10s} {'' if ratio is None else f'{ratio:8.2f}'}")
        print(f"stream / floor (files): {floor_files / streamed:.2f}; end to end / compute: "
              f"{compute / end_to_end:.2f} (1.00: reading costs the training nothing)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
