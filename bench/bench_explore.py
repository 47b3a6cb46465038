"""Benchmark: the explorer on a synthetic paper-shape run (62 layers, d = 5376, 10 full positions, depths 1-4,
bfloat16, the shape ``bench/bench_analyses.py`` makes): open time, question-view time, position-view and hover
time, and the server's memory. Run by hand (not in CI):

    python bench/bench_explore.py --questions 40               # ~2.6 GB run; written once, then reused with --reuse
    python bench/bench_explore.py --questions 40 --workdir /tmp/be --keep --reuse

The measurements run in a fresh subprocess (its memory is its own), through Starlette's TestClient (the same
endpoints the page calls, without a socket):

  open          open_explorer (Run.open: footers and consistency; every table page read and checked) + the first
                question list (/api/questions)
  question      /api/question/{id}, cold (nothing cached), for several questions: median and max
  position      /api/position (overlap heatmap, regime at the GMM threshold, L2, logit lens), cold
  hover         /api/token, one token's top-K per iteration (logits cached by the question view)
  peak RSS      VmHWM of the server process after all requests and after the GMM fit (a full pass over the hidden
                window of the smallest and largest depth, in a child process) has finished, and the child's peak;
                its ratio to the run's size on disk (log: ``bench/results/explore_memory.log``)

The issue's goals: a 12 GB paper-shape run opens in under 2 s, a question view loads in under 1 s, and the server
stays under 1 GB however many questions the run holds.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PAPER = dict(depths=(1, 2, 3, 4), full_positions=10, num_layers=62, hidden_size=5376)


def _hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(run_path: str, n_views: int) -> dict[str, float]:
    """Time the explorer's endpoints on ``run_path`` in this process (see the module docstring)."""
    from starlette.testclient import TestClient

    from sst_interp.explore.config import ExploreConfig
    from sst_interp.explore.server import create_app, open_explorer

    start = time.perf_counter()
    explorer = open_explorer(ExploreConfig(run=Path(run_path)))
    client = TestClient(create_app(explorer))
    listing = client.get("/api/questions")
    open_s = time.perf_counter() - start
    assert listing.status_code == 200, listing.text
    ids = [r["question_id"] for r in listing.json()["rows"]]
    picks = ids[:: max(1, len(ids) // n_views)][:n_views]
    question_s, position_s, hover_s = [], [], []
    for qid in picks:
        t = time.perf_counter()
        view = client.get(f"/api/question/{qid}")
        question_s.append(time.perf_counter() - t)
        assert view.status_code == 200, view.text
        t = time.perf_counter()
        assert client.get(f"/api/token?q={qid}&depth=4&turn=0&pos=1").status_code == 200
        hover_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        pos = client.get(f"/api/position?q={qid}&depth=4&turn=0&pos=3")
        position_s.append(time.perf_counter() - t)
        assert pos.status_code == 200, pos.text
    rss_views = _hwm_mb()
    t = time.perf_counter()
    while not explorer.source.threshold.ready:
        time.sleep(0.1)
    fit_s = time.perf_counter() - t
    return {"open_s": open_s, "question_median_s": statistics.median(question_s), "question_max_s": max(question_s),
            "position_median_s": statistics.median(position_s), "hover_median_s": statistics.median(hover_s),
            "views": len(picks), "rss_after_views_mb": rss_views, "fit_wait_s": fit_s,
            "threshold": explorer.source.threshold.value, "threshold_source": explorer.source.threshold.source,
            "peak_rss_mb": _hwm_mb(),
            # the fit's child process, joined by now: its own peak (Linux reports ru_maxrss in KiB)
            "fit_child_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def _write(path: Path, n: int, dtype: str) -> float:
    from sst_interp.synthetic import SyntheticSpec, write_synthetic_run

    spec = SyntheticSpec(n_questions=n, depths=PAPER["depths"], full_positions=PAPER["full_positions"],
                         num_layers=PAPER["num_layers"], hidden_size=PAPER["hidden_size"], vocab_size=262144,
                         top_k=128, dtype=dtype, batch_questions=4, seed=0)
    start = time.perf_counter()
    write_synthetic_run(path, spec)
    return time.perf_counter() - start


def _size_gb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2 ** 30


def main(argv: list[str] | None = None) -> None:
    """Write (or reuse) the run, measure in a subprocess, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=40, help="questions of the synthetic run (paper: 198)")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--views", type=int, default=8, help="questions whose views are timed")
    parser.add_argument("--workdir", help="where the run is written (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the run")
    parser.add_argument("--reuse", action="store_true", help="time the run already in --workdir")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args.views)))
        return
    base = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench_explore_"))
    path = base / f"run_q{args.questions}_{args.dtype}"
    try:
        if args.reuse and (path / "manifest.json").is_file():
            made = "reused"
        else:
            made = f"written in {_write(path, args.questions, args.dtype):.0f} s"
        run_mb = _size_gb(path) * 1024
        print(f"run: {args.questions} questions, depths 1-4, 10 full positions, 62 layers, d=5376, {args.dtype}: "
              f"{_size_gb(path):.2f} GB on disk, {made}")
        out = subprocess.run([sys.executable, __file__, "--measure", str(path), "--views", str(args.views)],
                             check=True, capture_output=True, text=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"open (Run.open + tables checked + question list): {r['open_s']:.2f} s")
        print(f"question view (cold, {r['views']} questions): median {r['question_median_s']:.2f} s, "
              f"max {r['question_max_s']:.2f} s")
        print(f"position view (cold): median {r['position_median_s']:.2f} s; hover: median "
              f"{r['hover_median_s'] * 1000:.0f} ms")
        print(f"server peak RSS: {r['rss_after_views_mb']:.0f} MB after the views; {r['peak_rss_mb']:.0f} MB after "
              f"the background GMM fit ({r['threshold_source']}: {r['threshold']:.4f}; waited {r['fit_wait_s']:.0f} s "
              f"more for it); the fit's own process peaked at {r['fit_child_peak_rss_mb']:.0f} MB")
        # the goal for a run of any size (issue 31; 45 item 8): the server within twice the run on disk
        peak = max(r["rss_after_views_mb"], r["peak_rss_mb"])
        print(f"server peak / run on disk: {peak:.0f} MB / {run_mb:.0f} MB = {peak / run_mb:.2f}x (goal: at most 2x)")
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
