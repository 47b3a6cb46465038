"""``torchrun --nproc-per-node 2 -m sst_interp.record``: two gloo processes on the CPU record one run that equals the
single-process run of the same command (same rows, same arrays, up to row order); a run whose rank died resumes;
bad input stops every rank with the one-line error. Plus the pure pieces: the split of the work and the
environment torchrun sets."""

from __future__ import annotations

import json
import re
import os
import signal
import time
from pathlib import Path

import pytest

from sst_interp.kernels.errors import UsageError
from sst_interp.cli.record import main
from sst_interp.record.ranks import (Ranks, batch_cost, batches_of_work, process_group, ranks_from_environment,
                                     share_of_work)
from sst_interp.store import Run
from sst_interp.store.verify import verify_run
from tests.unit.conftest import FAST, completed_question_depths, save_tiny_model
from tests.unit.distributed_helpers import DEPTHS, assert_same_run, finish, local_process_env, torchrun_record

pytestmark = pytest.mark.usefixtures("one_thread")


def _argv(model: Path, out: Path, limit: int, batch_size: int) -> list[str]:
    return FAST + ["--model", str(model), "--out", str(out), "--depths", ",".join(map(str, DEPTHS)),
                   "--limit", str(limit), "--batch-size", str(batch_size), "--demo-preset"]


def test_the_work_is_split_by_whole_batches():
    remaining = {1: list("abcde"), 2: list("ab"), 3: []}
    work = batches_of_work(remaining, [1, 2, 3], batch_size=2)
    assert work == [(1, ["a", "b"]), (1, ["c", "d"]), (1, ["e"]), (2, ["a", "b"])]
    assert share_of_work(work, Ranks()) == work
    # costs 2, 2, 1, 4, dealt costliest first to the least loaded rank: 4 -> rank 0, 2 -> 1, 2 -> 1, then 1 -> 0
    # (loads tie at 4: the lowest rank)
    shares = [share_of_work(work, Ranks(rank, 2), cost=batch_cost) for rank in range(2)]
    assert shares == [[work[2], work[3]], [work[0], work[1]]]
    shares = [share_of_work(work, Ranks(rank, 3), cost=batch_cost) for rank in range(3)]
    assert shares == [[work[3]], [work[0], work[2]], [work[1]]]
    assert share_of_work(list("abcde"), Ranks(1, 2)) == ["b", "d"]  # equal costs: round-robin


def test_the_shares_are_balanced_and_cover_the_work():
    remaining = {depth: [f"q{i}" for i in range(52)] for depth in (1, 2, 3, 4)}
    work = batches_of_work(remaining, [1, 2, 3, 4], batch_size=16)
    for world in (2, 3, 8):
        shares = [share_of_work(work, Ranks(rank, world), cost=batch_cost) for rank in range(world)]
        dealt = [item for share in shares for item in share]
        assert sorted(map(repr, dealt)) == sorted(map(repr, work))
        loads = [sum(batch_cost(item) for item in share) for share in shares]
        assert max(loads) - min(loads) <= max(batch_cost(item) for item in work)
        for share in shares:  # each rank records in the single process's order
            assert share == [item for item in work if item in share]


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


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finding torchrun's workers reads /proc (Linux)")
def test_a_run_whose_rank_died_resumes_to_the_same_result(tmp_path):
    model = save_tiny_model(tmp_path / "model")
    questions = 12
    out = tmp_path / "together"
    proc = torchrun_record(_argv(model, out, limit=questions, batch_size=1))
    deadline = time.monotonic() + 240
    try:
        while completed_question_depths(out) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        workers = _worker_pids(proc.pid)
        os.kill(workers[1], signal.SIGKILL)  # rank 1 dies; torchrun then stops rank 0
    finally:
        output = finish(proc)
    assert proc.returncode != 0, output[-3000:]
    before = completed_question_depths(out)
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
    # Every rank raises the message (rank 1 hears it from rank 0, it does not wait); torchrun stops the group at the
    # first exit, so rank 1 may be stopped before it prints: one line at least, and the first failure is exit 2.
    assert 1 <= len(lines) <= 2, output[-3000:]
    assert re.search(r"Root Cause.*?exitcode\s*:\s*2\b", output, re.S), output[-3000:]
    assert "sst_interp/" not in output  # no traceback from our code (torchrun prints one of its own launcher)
    assert (out / "cat.jpg").read_bytes() == b"meow" and sorted(p.name for p in out.iterdir()) == ["cat.jpg"]


def _run_on_main_worker(rank: int, port: int, results) -> None:
    os.environ.update(local_process_env(), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    ranks = Ranks(rank, 2, rank)

    def refuse() -> None:
        raise UsageError("--out x is a file, not a run directory; pick another --out")

    with process_group(ranks):
        assert ranks.run_on_main(lambda: 41 + 1) == (42 if rank == 0 else None)
        try:
            ranks.run_on_main(refuse)
        except UsageError as err:
            results.put((rank, str(err)))


def test_an_error_on_rank_0_is_raised_on_every_rank():
    """Bad input found by rank 0 ends rank 1 too, with the same one-line message (it does not wait at a barrier)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    context = mp.get_context("spawn")
    results = context.Queue()
    mp.start_processes(_run_on_main_worker, args=(port, results), nprocs=2, join=True, start_method="spawn")
    got = sorted(results.get(timeout=60) for _ in range(2))
    assert got == [(0, "--out x is a file, not a run directory; pick another --out"),
                   (1, "--out x is a file, not a run directory; pick another --out")]


def test_device_map_and_torchrun_do_not_combine(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(SystemExit) as exit_info:
        main(FAST + ["--device-map", "auto", "--out", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    assert "use one or the other" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
