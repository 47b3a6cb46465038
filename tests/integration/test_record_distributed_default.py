"""``torchrun --nproc-per-node 2 -m sst_interp.record`` on the real default backbone: CodeACT episodes of the
shipped demo-codeact SST, recorded by two gloo processes on the CPU, equal the single-process run of the same
command (same episodes, rows and arrays, up to row order). Depth 1 only, to keep the suite's time: two processes
at depths 1-2 are held on a tiny model by tests/unit/test_record_distributed.py."""

from __future__ import annotations

import pytest
import torch

from sst_interp.cli.record import main as record_main
from sst_interp.store import Run
from tests.integration.test_record_report_default import SHARED
from tests.unit.distributed_helpers import assert_same_run, finish, torchrun_record

pytestmark = pytest.mark.slow


def _argv(out) -> list[str]:
    return ["--protocol", "codeact", "--questions", "gsm8k", "--data", str(SHARED / "gsm8k"), "--limit", "2",
            "--depths", "1", "--batch-size", "1", "--max-new-tokens", "48", "--max-turns", "2",
            "--full-positions", "2", "--sketch-positions", "4", "--top-k", "8", "--device", "cpu", "--out", str(out)]


def test_two_processes_record_the_same_codeact_run_as_one(tmp_path):
    proc = torchrun_record(_argv(tmp_path / "together"))
    output = finish(proc, timeout=900)
    assert proc.returncode == 0, output[-3000:]
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as each torchrun worker runs (OMP_NUM_THREADS=1): same kernels, same sums
    try:
        record_main(_argv(tmp_path / "alone"))
    finally:
        torch.set_num_threads(before)
    assert_same_run(tmp_path / "together", tmp_path / "alone", depths=(1,))
    run = Run.open(tmp_path / "together")
    assert run.protocol == "codeact" and len(run.episodes()) == 2
    # one batch per rank, committed in whichever order the ranks finished them
    assert sorted(len(b["question_ids"]) for b in run.manifest["batches"]["1"]) == [1, 1]
    assert run.manifest["sandbox"]["backend"] == "bwrap"
