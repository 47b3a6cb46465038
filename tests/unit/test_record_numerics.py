"""The numerics fingerprint in the run identity (issue 32 item 1): ``--threads`` sets and records the CPU thread count;
a resume whose fingerprint differs is refused with one line naming the setting and how to match it; the same
resume with the run's settings completes bit-identical to an uninterrupted run; torchrun's ranks must agree."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
import transformers

from sst_interp.cli.record import main
from sst_interp.kernels.errors import UsageError
from sst_interp.record.numerics import FIELDS, check_numerics, check_ranks_agree, cpu_threads, fingerprint_differences
from sst_interp.record.ranks import Ranks, process_group
from tests.unit.conftest import FAST, completed_question_depths, fails_with_one_error_line, save_tiny_model
from tests.unit.distributed_helpers import DEPTHS, assert_same_run, local_process_env

pytestmark = pytest.mark.usefixtures("one_thread")

QUESTIONS = 8


def _argv(model, out, threads: int) -> list[str]:
    return FAST + ["--model", str(model), "--out", str(out), "--depths", ",".join(map(str, DEPTHS)),
                   "--limit", str(QUESTIONS), "--batch-size", "1", "--demo-preset", "--threads", str(threads)]


def _numerics(out) -> dict:
    return json.loads((out / "manifest.json").read_text())["identity"]["numerics"]


def test_the_fingerprint_names_this_machine_and_the_flags(tmp_path):
    model = save_tiny_model(tmp_path / "model")
    out = tmp_path / "run"
    main(FAST + ["--model", str(model), "--out", str(out), "--depths", "1", "--limit", "1", "--batch-size", "3",
                 "--demo-preset", "--threads", "2"])
    numerics = _numerics(out)
    assert sorted(numerics) == sorted(FIELDS)  # the manifest is written with sorted keys
    assert numerics["threads"] == 2 and torch.get_num_threads() == 1  # set while recording, restored afterwards
    assert numerics["device_kind"] == "cpu" and numerics["cuda_capability"] is None
    assert numerics["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert numerics["torch"] == torch.__version__ and numerics["transformers"] == transformers.__version__
    assert numerics["dtype"] == "float32" and numerics["batch_size"] == 3 and numerics["attention"] == "eager"
    assert numerics["deterministic_algorithms"] is False and numerics["device_name"]


def test_without_threads_torch_keeps_its_own_count_and_records_it(tmp_path):
    model = save_tiny_model(tmp_path / "model")
    out = tmp_path / "run"
    main(FAST + ["--model", str(model), "--out", str(out), "--depths", "1", "--limit", "1", "--demo-preset"])
    assert _numerics(out)["threads"] == 1 == torch.get_num_threads()  # the fixture's count, untouched


def test_a_differing_fingerprint_is_refused_with_the_setting_and_its_remedy(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    old = {name: None for name in FIELDS} | {"threads": 1, "batch_size": 8, "torch": "2.13.0", "dtype": "float32"}
    (out / "manifest.json").write_text(json.dumps({"identity": {"numerics": old}, "status": {}}))
    check_numerics(out, dict(old))  # the same: nothing to say
    with pytest.raises(UsageError, match=r"threads=1, this command has threads=2, .*; pass --threads 1 to resume"):
        check_numerics(out, dict(old, threads=2))
    with pytest.raises(UsageError, match=r"dtype='float32', this command has dtype='bfloat16' \(and batch_size\), "
                                         r".*; pass --dtype float32 to resume"):
        check_numerics(out, dict(old, batch_size=4, dtype="bfloat16"))
    with pytest.raises(UsageError, match=r"batch_size=8, .*; pass --batch-size 8 to resume"):
        check_numerics(out, dict(old, batch_size=4))
    with pytest.raises(UsageError, match=r"install torch==2.13.0"):
        check_numerics(out, dict(old, torch="2.14.0"))
    (out / "manifest.json").write_text(json.dumps({"identity": {"model": "x"}, "status": {}}))
    with pytest.raises(UsageError, match="without a numerics fingerprint"):
        check_numerics(out, dict(old))
    check_numerics(tmp_path / "absent", dict(old))  # a new run: nothing to compare with
    assert fingerprint_differences(old, dict(old, attention="sdpa", threads=3)) == ["threads", "attention"]


def test_threads_are_set_for_the_body_and_restored():
    before = torch.get_num_threads()
    with cpu_threads(2) as threads:
        assert threads == 2 == torch.get_num_threads()
    assert torch.get_num_threads() == before
    with cpu_threads(None) as threads:
        assert threads == before == torch.get_num_threads()


def test_threads_below_one_are_refused(tmp_path, capsys):
    fails_with_one_error_line(capsys, main, FAST + ["--threads", "0", "--out", str(tmp_path / "run")],
                              "--threads must be at least 1, got 0")
    assert not (tmp_path / "run").exists()


def _agree_worker(rank: int, port: int, results) -> None:
    os.environ.update(local_process_env(), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    ranks = Ranks(rank, 2, rank)
    fingerprint = {"device_kind": "cpu", "threads": 1 + rank}
    with process_group(ranks):
        check_ranks_agree({"device_kind": "cpu", "threads": 1}, ranks)  # the same on both: passes
        try:
            check_ranks_agree(fingerprint, ranks)
        except UsageError as err:
            results.put((rank, str(err)))


def test_ranks_with_different_fingerprints_all_refuse_to_start():
    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    context = mp.get_context("spawn")
    results = context.Queue()
    mp.start_processes(_agree_worker, args=(port, results), nprocs=2, join=True, start_method="spawn")
    got = sorted(results.get(timeout=60) for _ in range(2))
    message = ("rank 1 records with threads=2 but rank 0 with threads=1; every process of one run must compute the "
               "same numbers: start them with the same settings (e.g. the same --threads)")
    assert got == [(0, message), (1, message)]


@pytest.mark.slow
def test_a_resume_with_other_threads_is_refused_and_with_the_same_completes_bit_identical(tmp_path, capsys):
    model = save_tiny_model(tmp_path / "model")
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "sst_interp.record", *_argv(model, out, threads=1)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    try:
        while completed_question_depths(out) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
        stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert proc.returncode == -signal.SIGKILL, stderr[-2000:]
    before = completed_question_depths(out)
    assert 2 <= before < QUESTIONS * len(DEPTHS), "the kill did not land mid-run"
    manifest = (out / "manifest.json").read_bytes()

    fails_with_one_error_line(capsys, main, _argv(model, out, threads=2), "pass --threads 1 to resume")
    assert (out / "manifest.json").read_bytes() == manifest and completed_question_depths(out) == before

    main(_argv(model, out, threads=1))  # the same command as the interrupted one
    main(_argv(model, tmp_path / "clean", threads=1))
    assert_same_run(out, tmp_path / "clean")
    assert _numerics(out) == _numerics(tmp_path / "clean")
