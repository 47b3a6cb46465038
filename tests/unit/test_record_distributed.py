"""``torchrun --nproc-per-node 2 -m sst_interp.record``: two gloo processes on the CPU record one run that equals the
single-process run of the same command (same rows, same arrays, up to row order); a run whose rank died resumes;
bad input stops every rank with the one-line error. Plus the pure pieces: the split of the work and the
environment torchrun sets."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from sst_interp.errors import UsageError
from sst_interp.record import main
from sst_interp.record.ranks import Ranks, batches_of_work, ranks_from_environment, share_of_work
from sst_interp.store import Run
from sst_interp.store.verify import verify_run
from tests.unit.conftest import FAST, save_tiny_model
from tests.unit.distributed_helpers import DEPTHS, assert_same_run, finish, torchrun_record

pytestmark = pytest.mark.usefixtures("one_thread")



def _argv(model: Path, out: Path, limit: int, batch_size: int) -> list[str]:
    return FAST + ["--model", str(model), "--out", str(out), "--depths", ",".join(map(str, DEPTHS)),
                   "--limit", str(limit), "--batch-size", str(batch_size), "--demo-preset"]


def test_the_work_is_split_by_whole_batches():
    remaining = {1: list("abcde"), 2: list("ab"), 3: []}
    work = batches_of_work(remaining, [1, 2, 3], batch_size=2)
    assert work == [(1, ["a", "b"]), (1, ["c", "d"]), (1, ["e"]), (2, ["a", "b"])]
    shares = [share_of_work(work, Ranks(rank, 3)) for rank in range(3)]
    assert shares == [[work[0], work[3]], [work[1]], [work[2]]]
    assert share_of_work(work, Ranks()) == work


def test_ranks_come_from_the_torchrun_environment():
    assert ranks_from_environment({}) == Ranks(0, 1, 0)
    assert ranks_from_environment({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"}) == Ranks(3, 4, 1)
    for bad in ({"WORLD_SIZE": "2", "RANK": "2"}, {"WORLD_SIZE": "two"}, {"WORLD_SIZE": "0"}):
        with pytest.raises(UsageError, match="torchrun"):
            ranks_from_environment(bad)


@pytest.mark.slow
def test_two_processes_equal_one(tmp_path):
    model = save_tiny_model(tmp_path / "model")
    argv = _argv(model, tmp_path / "together", limit=7, batch_size=2)
    proc = torchrun_record(argv)
    output = finish(proc)
    assert proc.returncode == 0, output[-3000:]
    main(_argv(model, tmp_path / "alone", limit=7, batch_size=2))
    assert_same_run(tmp_path / "together", tmp_path / "alone")
    manifest = json.loads((tmp_path / "together" / "manifest.json").read_text())
    assert manifest["device"] == "cpu" and manifest["batch_size"] == 2
    assert output.count("staged capacity") == 1  # rank 0 prints the summary, rank 1 stays quiet
    report = verify_run(tmp_path / "together")
    assert report.ok and not report.strays


def _worker_pids(launcher: int) -> dict[int, int]:
    """{rank: pid} of the processes torchrun started (its children whose environment has RANK)."""
    pids = {}
    children = Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()
    for pid in map(int, children):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except FileNotFoundError:
            continue
        for item in environ:
            if item.startswith(b"RANK="):
                pids[int(item[5:])] = pid
    return pids


def _completed(out: Path) -> int:
    try:
        status = json.loads((out / "manifest.json").read_text())["status"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return 0
    return sum(len(ids) for ids in status.values())


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finding torchrun's workers reads /proc (Linux)")
def test_a_run_whose_rank_died_resumes_to_the_same_result(tmp_path):
    model = save_tiny_model(tmp_path / "model")
    questions = 12
    out = tmp_path / "together"
    proc = torchrun_record(_argv(model, out, limit=questions, batch_size=1))
    deadline = time.monotonic() + 240
    try:
        while _completed(out) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        workers = _worker_pids(proc.pid)
        os.kill(workers[1], signal.SIGKILL)  # rank 1 dies; torchrun then stops rank 0
    finally:
        output = finish(proc)
    assert proc.returncode != 0, output[-3000:]
    before = _completed(out)
    assert 3 <= before < questions * len(DEPTHS), "the kill did not land mid-run"

    again = torchrun_record(_argv(model, out, limit=questions, batch_size=1))  # the same command again
    output = finish(again)
    assert again.returncode == 0, output[-3000:]
    main(_argv(model, tmp_path / "alone", limit=questions, batch_size=1))
    assert_same_run(out, tmp_path / "alone")
    report = verify_run(out)
    assert report.ok and not report.strays
    listed = {s["file"] for batches in Run.open(out).manifest["batches"].values() for b in batches
              for s in b["shards"].values()}
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*.parquet")} - {"questions.parquet",
                                                                                     "generations.parquet"}
    assert on_disk == listed  # the dead rank's unfinished shards are gone


@pytest.mark.slow
def test_bad_input_stops_every_rank_with_the_one_line_error(tmp_path):
    model = save_tiny_model(tmp_path / "model")
    out = tmp_path / "photos"
    out.mkdir()
    (out / "cat.jpg").write_bytes(b"meow")
    proc = torchrun_record(_argv(model, out, limit=2, batch_size=1))
    output = finish(proc)
    assert proc.returncode != 0
    lines = [line for line in output.splitlines() if "not an sst-interp run" in line]
    assert len(lines) == 2, output[-3000:]  # both ranks stop with the message (rank 1 does not hang)
    assert output.count("exitcode  : 2") == 2  # torchrun's own failure report: each rank exited with 2
    assert "sst_interp/" not in output  # no traceback from our code (torchrun prints one of its own launcher)
    assert (out / "cat.jpg").read_bytes() == b"meow" and sorted(p.name for p in out.iterdir()) == ["cat.jpg"]
