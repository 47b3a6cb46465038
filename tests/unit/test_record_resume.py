"""Kill a recording subprocess mid-run (SIGKILL), rerun the same command: no question lost or duplicated."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from sst_interp.cli.record import main
from sst_interp.store import Run
from tests.unit.conftest import FAST, completed_question_depths, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

QUESTIONS = 12
DEPTHS = (1, 2)


def _argv(model, out):
    return FAST + ["--model", str(model), "--out", str(out), "--depths", ",".join(map(str, DEPTHS)),
                   "--limit", str(QUESTIONS), "--batch-size", "1", "--demo-preset"]


@pytest.mark.slow
def test_killed_run_resumes_without_loss_or_duplicates(tmp_path):
    model = save_tiny_model(tmp_path / "model")
    out = tmp_path / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "sst_interp.record", *_argv(model, out)], env=env,
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
    interrupted = Run.open(out)  # only complete, listed shards are visible
    assert sum(len(interrupted.question_ids(d)) for d in DEPTHS) == before

    main(_argv(model, out))  # the same command again
    run = Run.open(out)
    ids = [f"demo-{i:03d}" for i in range(QUESTIONS)]
    for depth in DEPTHS:
        assert run.question_ids(depth) == ids
        assert [b.question_id for b in run.hidden(depth)] == ids
        assert [b.question_id for b in run.logits(depth)] == ids
    gens = run.generations()
    assert len(gens) == QUESTIONS * len(DEPTHS) and not gens.duplicated(["question_id", "depth"]).any()
    listed = {s["file"] for batches in run.manifest["batches"].values() for b in batches for s in b["shards"].values()}
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*.parquet")} - {"questions.parquet",
                                                                                     "generations.parquet"}
    assert on_disk == listed
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]
    for depth, batches in run.manifest["batches"].items():
        flat = [q for b in batches for q in b["question_ids"]]
        assert sorted(flat) == sorted(run.manifest["status"][depth]) and len(flat) == len(set(flat))

    clean = tmp_path / "clean"
    main(_argv(model, clean))
    reference = Run.open(clean)
    key = ["depth", "question_id"]
    a = gens.sort_values(key).token_ids.map(list).tolist()
    b = reference.generations().sort_values(key).token_ids.map(list).tolist()
    assert a == b
    for x, y in zip(run.hidden(2), reference.hidden(2)):
        assert np.array_equal(x.values, y.values)
