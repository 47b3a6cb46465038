"""Benchmark: analyses group A (overlap, basins, divergence, convergence) on a large synthetic run vs the floor of
just reading the run's shards, side by side in one invocation. Run by hand (not in CI):

    python bench/bench_analyses.py --scale 0.25            # 50 questions at paper size (62 layers, d=5376)
    python bench/bench_analyses.py --scale 1 --dtype float32  # the full paper scale (~26 GB of hidden states)
    python bench/bench_analyses.py --memory-only           # peak memory at 50 vs 200 questions, d=1024
    python bench/bench_analyses.py --scale 0.25 --workdir /tmp/ba --keep --reuse   # time the runs kept last time

Each phase runs in its own subprocess so its peak memory is its own: VmHWM (resident high-water mark: numpy +
pyarrow + Python + imported libraries), the tracemalloc peak (Python and numpy allocations) and pyarrow's pool
peak. Each phase also reports its CPU seconds (process time, all threads): on a shared machine the steadier figure,
since the wall clock also counts the time other processes hold the core.

Phases:
  read-all     every hidden and logits shard of every depth, decoded to arrays (the floor of touching the run)
  read-needed  the shards the analyses read: hidden at the smallest and largest depth, position 0 at the second
               depth, generations (the floor for the analyses' own I/O)
  analyses     punctuated_equilibrium (cross-run overlap, GMM 2-5 components, summary, divergence, causal
               ordering, pos0 tables, layer profiles, heatmaps) + convergence_monitoring
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

PAPER = dict(n_questions=198, depths=(1, 2, 3, 4), full_positions=10, num_layers=62, hidden_size=5376)


@dataclass
class Config:
    """Benchmark configuration.

    Args:
        scale: fraction of the paper's 198 questions (layers, d and positions stay at paper size).
        questions: explicit question count (overrides scale).
        hidden_size: d (default 5376).
        num_layers: layers (default 62).
        dtype: hidden dtype of the synthetic run (bfloat16 halves the disk).
        sketch_positions: sketch positions per question (0 by default: at d=5376 each costs ~2.5 MB/question).
        workdir: where runs are written (default a temp dir, removed afterwards unless keep).
        keep: keep the generated runs.
        reuse: time the runs already in ``workdir`` (written by an earlier ``--keep`` with the same settings)
            instead of generating them again; a run that is not there is generated.
        memory_only: only the 50-vs-200-question peak-memory check.
        memory_hidden_size: d of the memory check.
    """

    scale: float = 0.1
    questions: int | None = None
    hidden_size: int = PAPER["hidden_size"]
    num_layers: int = PAPER["num_layers"]
    dtype: str = "bfloat16"
    sketch_positions: int = 0
    workdir: str | None = None
    keep: bool = False
    reuse: bool = False
    memory_only: bool = False
    memory_hidden_size: int = 1024


def _hwm_kb() -> float:
    """Peak resident set size of this process in kB: VmHWM (reset at exec, unlike ru_maxrss, which Linux carries
    over from the parent), falling back to ru_maxrss where /proc is absent."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return float(line.split()[1])
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _peaks(start: float, cpu_start: float) -> dict[str, float]:
    import pyarrow as pa

    _, traced = tracemalloc.get_traced_memory()
    return {"wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu_start,
            "peak_rss_mb": _hwm_kb() / 1024,
            "peak_traced_mb": traced / 2 ** 20, "peak_arrow_pool_mb": pa.default_memory_pool().max_memory() / 2 ** 20}


def phase(name: str, run_path: str) -> dict[str, float]:
    """Run one phase in this process and return its wall time and memory peaks."""
    from sst_interp.analyses.basin_profiles import punctuated_equilibrium
    from sst_interp.analyses.convergence import convergence_monitoring
    from sst_interp.store import Run

    tracemalloc.start()  # imports above are outside the measured region
    start = time.perf_counter()
    cpu_start = time.process_time()
    run = Run.open(run_path)
    if name == "read-all":
        for depth in run.depths:
            for block in run.hidden(depth):
                block.values.shape  # decoded [P, I, L, d]
            for lb in run.logits(depth):
                lb.top_ids.shape
        run.generations()
    elif name == "read-needed":
        for block in run.hidden(run.depths[0]):
            block.values.shape
        for block in run.hidden(run.depths[-1]):
            block.values.shape
        if len(run.depths) > 1:
            for block in run.hidden(run.depths[1], positions=[0]):
                block.values.shape
        run.generations()
    elif name == "analyses":
        pe = punctuated_equilibrium(run)
        conv = convergence_monitoring(run)
        print(json.dumps({"threshold": getattr(getattr(pe, "gmm", None), "threshold", None),
                          "convergence_mw_p": getattr(conv, "mann_whitney_p", None)}), file=sys.stderr)
    else:
        raise SystemExit(f"unknown phase {name}")
    return _peaks(start, cpu_start)


def _run_phase(name: str, run_path: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--phase", name, "--run", str(run_path)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _write(path: Path, n: int, cfg: Config, hidden_size: int) -> float:
    from sst_interp.synthetic import SyntheticSpec, write_synthetic_run

    spec = SyntheticSpec(n_questions=n, depths=PAPER["depths"], full_positions=PAPER["full_positions"],
                         sketch_positions=cfg.sketch_positions, num_layers=cfg.num_layers, hidden_size=hidden_size,
                         vocab_size=262144, top_k=128, dtype=cfg.dtype, batch_questions=4, seed=0)
    start = time.perf_counter()
    write_synthetic_run(path, spec)
    return time.perf_counter() - start


def _write_or_reuse(path: Path, n: int, cfg: Config, hidden_size: int) -> float | None:
    """Generate the run at ``path`` (its wall time; the writer resumes a run of the same spec found there), or
    None when ``cfg.reuse`` and a run is already there (timed as it is, unchecked)."""
    if cfg.reuse and (path / "manifest.json").is_file():
        return None
    return _write(path, n, cfg, hidden_size)


def _size_gb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2 ** 30


def main(argv: list[str] | None = None) -> None:
    """Parse flags, generate the runs, time the phases and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--run", help=argparse.SUPPRESS)
    for name, default in vars(Config()).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(flag, action="store_true")
        else:
            parser.add_argument(flag, type=type(default) if default is not None else
                                (int if name == "questions" else str), default=default)
    args = parser.parse_args(argv)
    if args.phase:
        print(json.dumps(phase(args.phase, args.run)))
        return
    cfg = Config(**{k: getattr(args, k) for k in vars(Config())})
    base = Path(cfg.workdir) if cfg.workdir else Path(tempfile.mkdtemp(prefix="bench_analyses_"))
    base.mkdir(parents=True, exist_ok=True)
    print(f"machine: {os.cpu_count()} cpus, python {sys.version.split()[0]}; workdir {base}")
    try:
        if not cfg.memory_only:
            n = cfg.questions or max(1, round(PAPER["n_questions"] * cfg.scale))
            path = base / f"run_q{n}"
            gen = _write_or_reuse(path, n, cfg, cfg.hidden_size)
            made = "reused" if gen is None else f"generated in {gen:.0f} s"
            print(f"run: {n} questions, depths 1-4, 10 positions, {cfg.num_layers} layers, d={cfg.hidden_size}, "
                  f"{cfg.dtype}: {_size_gb(path):.2f} GB on disk, {made}")
            results = {name: _run_phase(name, path) for name in ("read-all", "read-needed", "analyses")}
            print(f"{'phase':<12} {'wall s':>8} {'cpu s':>7} {'peak RSS MB':>12} {'traced MB':>10} {'arrow MB':>9}")
            for name, r in results.items():
                print(f"{name:<12} {r['wall_s']:>8.1f} {r['cpu_s']:>7.1f} {r['peak_rss_mb']:>12.0f} "
                      f"{r['peak_traced_mb']:>10.0f} {r['peak_arrow_pool_mb']:>9.0f}")
            ratio_needed = results["analyses"]["wall_s"] / results["read-needed"]["wall_s"]
            ratio_all = results["analyses"]["wall_s"] / results["read-all"]["wall_s"]
            cpu_needed = results["analyses"]["cpu_s"] / results["read-needed"]["cpu_s"]
            print(f"analyses / read-needed wall: {ratio_needed:.2f}x; analyses / read-all wall: {ratio_all:.2f}x; "
                  f"analyses / read-needed cpu: {cpu_needed:.2f}x")
            if not cfg.keep:
                shutil.rmtree(path)
        peaks = {}
        for n in (50, 200):
            path = base / f"mem_q{n}"
            _write_or_reuse(path, n, cfg, cfg.memory_hidden_size)
            peaks[n] = _run_phase("analyses", path)
            print(f"memory check d={cfg.memory_hidden_size}: {n} questions: analyses peak RSS "
                  f"{peaks[n]['peak_rss_mb']:.0f} MB, traced {peaks[n]['peak_traced_mb']:.1f} MB, "
                  f"wall {peaks[n]['wall_s']:.1f} s")
            if not cfg.keep:
                shutil.rmtree(path)
        print(f"peak RSS 200 / 50 questions: {peaks[200]['peak_rss_mb'] / peaks[50]['peak_rss_mb']:.2f}x; "
              f"traced: {peaks[200]['peak_traced_mb'] / peaks[50]['peak_traced_mb']:.2f}x")
    finally:
        if not cfg.keep and not cfg.workdir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
