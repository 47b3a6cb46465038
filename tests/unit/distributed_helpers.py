"""Helpers of the multi-process recording tests: run ``torchrun -m sst_interp.record`` and compare two runs."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from sst_interp.store import Run

DEPTHS = (1, 2)


def local_process_env() -> dict[str, str]:
    """This environment for processes that form a process group on this machine: no launcher variables left over
    from outside, one thread each, and gloo on the loopback interface (whatever the host name resolves to)."""
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR",
                                                             "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if Path("/sys/class/net/lo").exists():
        env["GLOO_SOCKET_IFNAME"] = "lo"
    return env


def torchrun_record(argv: list[str], nproc: int = 2) -> subprocess.Popen:
    """``torchrun --standalone --nproc-per-node N -m sst_interp.record ARGV`` (one thread per process)."""
    env = local_process_env()
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               "-m", "sst_interp.record", *argv]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, timeout: float = 300) -> str:
    """Wait for ``proc``; its stdout and stderr together."""
    output, _ = proc.communicate(timeout=timeout)
    return output


def assert_same_run(run_path: Path, reference_path: Path, depths: tuple[int, ...] = DEPTHS) -> None:
    """Same questions, generations, hidden states, logits and sketches at each of ``depths``, up to row order."""
    run, reference = Run.open(run_path), Run.open(reference_path)
    key = ["depth", "question_id", "turn"]  # one generation row per model turn (one turn in a completion run)
    ours = run.generations().sort_values(key).reset_index(drop=True)
    theirs = reference.generations().sort_values(key).reset_index(drop=True)
    assert len(ours) == len(theirs) and not ours.duplicated(key).any()
    for column in ("question_id", "depth", "turn", "text", "correct"):
        assert ours[column].tolist() == theirs[column].tolist(), column
    assert ours.token_ids.map(list).tolist() == theirs.token_ids.map(list).tolist()
    episodes = [frame.sort_values(["depth", "question_id"]).reset_index(drop=True)
                for frame in (run.episodes(), reference.episodes())]
    assert episodes[0].equals(episodes[1])
    for depth in depths:
        assert sorted(run.question_ids(depth)) == sorted(reference.question_ids(depth))
        for kind in ("hidden", "logits", "sketch"):
            mine = {(block.question_id, block.turn): block for block in getattr(run, kind)(depth)}
            other = {(block.question_id, block.turn): block for block in getattr(reference, kind)(depth)}
            assert mine.keys() == other.keys() and mine, kind
            for key_, block in mine.items():
                for field in dataclasses.fields(block):
                    np.testing.assert_array_equal(getattr(block, field.name), getattr(other[key_], field.name),
                                                  err_msg=f"{kind} {field.name} {key_} depth {depth}")
