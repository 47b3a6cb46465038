"""Data-parallel training on two gloo processes on the CPU (``torchrun`` and ``accelerate launch``, as a user runs
them) equals the single-process run with the same global batch; a two-process run stopped after step k and resumed
equals an uninterrupted one; ``--fsdp`` (frozen weights sharded with FSDP2) computes exactly what the unsharded run
does; the number of processes is part of a run's identity. Plus the pure pieces: the split of a step's window, the
environment a launcher sets, the launch modes and flags that are refused.

Tolerance: the tiny model runs in float64, but the SST parameters (and so their gradients) are float32, as the
paper trains them. Two processes add the same per-micro-batch gradients in another order (two partial sums, then
the all-reduce), so the SST gradients may differ by a few float32 roundings (~1e-7 relative). Measured on this
model: train and validation losses agree to 1e-10 or better, the gradient norm to 2e-8 relative or better (with the
settings below: 2e-16 and 1e-13). ``RTOL = 1e-6`` leaves a margin of 50 or more above that, while the mistakes it
guards against are far above it: a rank that normalised by its own token count (or averaged instead of summing)
changes the gradient norm by a factor near 2 (AdamW hides a constant factor in the losses, not in the logged
gradient norm), and a wrong global batch changes the losses after the first step by more than 1e-3 (checked below,
so that the comparison can fail).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from sst_interp.kernels.errors import UsageError
from sst_interp.train import distributed
from sst_interp.cli.train import main
from sst_interp.train.data import DataOrder, data_format_from_config, pack_examples, tokenize_row

from .conftest import ACTIONS, chat_rows, chat_tokenizer, tiny_backbone, tiny_config, write_jsonl

REPO = Path(__file__).resolve().parents[3]
RTOL = 1e-6
COMPARED = ("train_loss", "val_loss", "grad_norm")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A tiny Gemma 3 saved as a Hugging Face folder (with the chat tokenizer) and small train/val files."""
    root = tmp_path_factory.mktemp("dp")
    tiny_backbone("gemma3", dtype=torch.float32).save_pretrained(root / "model")
    chat_tokenizer().save_pretrained(root / "model")
    write_jsonl(root / "train.jsonl", chat_rows(12))  # 12 sequences: 3 steps of 4 per epoch, so step 4 wraps
    write_jsonl(root / "val.jsonl", chat_rows(3, offset=40))  # 3 micro-batches: 2 on rank 0, 1 on rank 1
    return root


def _args(root: Path, out: Path, grad_accum: int, dropout: float = 0.0, checkpointing: bool = False) -> list[str]:
    actions = ",".join(f"{token}={index}" for token, index in ACTIONS.items())
    return ["--model", str(root / "model"), "--train-data", str(root / "train.jsonl"),
            "--val-data", str(root / "val.jsonl"), "--out", str(out), "--action-tokens", actions,
            "--dtype", "float64", "--device", "cpu", "--quantize", "none",
            "--gradient-checkpointing" if checkpointing else "--no-gradient-checkpointing",
            "--state-scale", "hidden", "--lora-r", "4", "--lora-alpha", "4", "--lora-dropout", str(dropout),
            "--lr-lora", "1e-2", "--lr-sst", "1e-2", "--warmup-steps", "0", "--max-steps", "4", "--eval-every", "2",
            "--grad-accum", str(grad_accum), "--threads", "1"]


def _env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "FSDP_"))}
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env = dict(env, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONPATH=path)
    if Path("/sys/class/net/lo").exists():  # gloo on the loopback interface, whatever the host name resolves to
        env["GLOO_SOCKET_IFNAME"] = "lo"
    return env


def _tool(name: str, module: str) -> list[str]:
    """The console script ``name`` of this environment, or ``python -m module``."""
    script = Path(sys.executable).with_name(name)
    return [str(script)] if script.is_file() else [sys.executable, "-m", module]


def _launch(command: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    for attempt in range(2):
        done = subprocess.run(command, env=_env(), cwd=REPO, capture_output=True, text=True, timeout=timeout)
        # the launchers pick a free port and bind it a moment later; on a busy machine another process can take it
        if done.returncode == 0 or "address already in use" not in (done.stdout + done.stderr).lower():
            break
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _torchrun(*argv: str) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc-per-node 2 ARGV``."""
    return _launch([*_tool("torchrun", "torch.distributed.run"), "--standalone", "--nproc-per-node", "2", *argv])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _log(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "train_log.csv")


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return {**load_file(str(folder / "adapter" / "adapter_model.safetensors")),
            **{f"sst.{k}": v for k, v in load_file(str(folder / "sst_state.safetensors")).items()}}


def _max_rel(a, b) -> float:  # noqa: ANN001 - two sequences of floats of the same length
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape
    return float(np.max(np.abs(a - b) / np.abs(b)))


def _assert_same_run(ours: Path, reference: Path) -> None:
    """Same log (up to the timings) and the same saved weights, to the last bit."""
    got, want = _log(ours), _log(reference)
    assert got["step"].tolist() == want["step"].tolist() == [1, 2, 3, 4]
    for column in COMPARED:
        pd.testing.assert_series_equal(got[column], want[column], rtol=0, atol=0)
    for folder in ("best", "last"):
        mine, theirs = _weights(ours / folder), _weights(reference / folder)
        assert mine.keys() == theirs.keys()
        for name in theirs:
            assert torch.equal(mine[name], theirs[name]), (folder, name)


#: Two processes with dropout (each rank has its own random stream) and gradient checkpointing.
def _dropout_args(root: Path, out: Path) -> list[str]:
    return _args(root, out, grad_accum=2, dropout=0.1, checkpointing=True)


@pytest.fixture(scope="module")
def dropout_run(workspace) -> Path:
    out = workspace / "full-dropout"
    _torchrun("-m", "sst_interp.train", *_dropout_args(workspace, out))
    return out


@pytest.fixture(scope="module")
def two_process_run(workspace) -> Path:
    """The user's command on two processes, through accelerate's launcher and the shipped config: grad_accum 2 per
    process, a global batch of 4 micro-batches."""
    out = workspace / "two"
    _launch([*_tool("accelerate", "accelerate.commands.accelerate_cli"), "launch",
             "--config_file", str(REPO / "examples" / "accelerate" / "ddp.yaml"),
             "--main_process_port", str(_free_port()), "-m", "sst_interp.train",
             *_args(workspace, out, grad_accum=2)])
    return out


# ------------------------------------------------------------------------------------------------ end to end
@pytest.mark.slow
def test_two_processes_equal_one_process_with_the_same_global_batch(workspace, two_process_run):
    assert main(_args(workspace, workspace / "one", grad_accum=4)) == 0
    ours, reference = _log(two_process_run), _log(workspace / "one")
    assert ours["step"].tolist() == reference["step"].tolist() == [1, 2, 3, 4]
    assert ours["tokens"].tolist() == reference["tokens"].tolist()
    for column in COMPARED:
        got, want = ours[column].dropna(), reference[column].dropna()
        assert len(got) == len(want) > 0, column
        assert _max_rel(got, want) < RTOL, column
    for folder in ("best", "last"):
        got, want = _weights(two_process_run / folder), _weights(workspace / "one" / folder)
        assert got.keys() == want.keys()
        for name in want:
            torch.testing.assert_close(got[name], want[name], rtol=RTOL, atol=1e-9, msg=name)
    # the SST parameters stay float32 in their own group, with their own learning rate
    assert all(v.dtype == torch.float32 for k, v in _weights(two_process_run / "best").items() if k.startswith("sst."))
    assert (ours["lr_sst"] == 1e-2).all()

    # The comparison can fail: the one-process run with grad_accum 2 (the global batch a mistaken split would give)
    # is far outside the tolerance.
    assert main(_args(workspace, workspace / "wrong", grad_accum=2)) == 0
    wrong = _log(workspace / "wrong")
    assert _max_rel(wrong["train_loss"].iloc[1:], reference["train_loss"].iloc[1:]) > 1e3 * RTOL
    assert _max_rel(wrong["grad_norm"], reference["grad_norm"]) > 1e3 * RTOL


@pytest.mark.slow
def test_only_rank_0_writes_and_the_run_records_its_processes(two_process_run):
    assert json.loads((two_process_run / "train_config.json").read_text())["world_size"] == 2
    assert json.loads((two_process_run / "summary.json").read_text())["world_size"] == 2
    log = _log(two_process_run)
    assert log["step"].tolist() == [1, 2, 3, 4]  # one row per step, not one per rank
    alpha = pd.read_csv(two_process_run / "alpha_log.csv")
    assert sorted(alpha["step"].unique()) == [0, 1, 2, 3, 4] and len(alpha) == 5 * 3
    rng = load_file(str(two_process_run / "last" / "optimizer.safetensors"))
    assert {"rng.rank0.cpu", "rng.rank1.cpu"} <= rng.keys()


@pytest.mark.slow
def test_resuming_with_another_number_of_processes_is_refused(workspace, two_process_run, capsys):
    copy = workspace / "two-copy"
    shutil.copytree(two_process_run, copy)
    args = _args(workspace, copy, grad_accum=2) + ["--max-steps", "6"]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "was trained by 2 process(es), this is 1" in err[-1]
    assert _log(copy)["step"].tolist() == [1, 2, 3, 4]  # nothing was touched


@pytest.mark.slow
def test_a_stopped_two_process_run_resumes_to_the_uninterrupted_one(workspace, dropout_run):
    # dropout on: each rank's own random stream must come back from last/ for the steps after the resume to match
    stopped = workspace / "stopped-dropout"
    _torchrun("-m", "tests.unit.train.interrupted_train", "2", "--", *_dropout_args(workspace, stopped))
    assert _log(stopped)["step"].tolist() == [1, 2]
    resumed = _torchrun("-m", "sst_interp.train", *_dropout_args(workspace, stopped))
    assert "resuming from" in resumed.stderr and "at step 2" in resumed.stderr
    _assert_same_run(stopped, dropout_run)


@pytest.mark.slow
def test_fsdp_shards_the_frozen_weights_and_changes_no_number(workspace, dropout_run):
    # A gathered weight is a bit-exact copy, so sharding changes nothing, not even with dropout and checkpointing;
    # stopped after step 2 and resumed (sharded again), it equals the unsharded, uninterrupted run.
    sharded = workspace / "fsdp"
    _torchrun("-m", "tests.unit.train.interrupted_train", "2", "--", *_dropout_args(workspace, sharded), "--fsdp")
    assert _log(sharded)["step"].tolist() == [1, 2]
    done = _torchrun("-m", "sst_interp.train", *_dropout_args(workspace, sharded), "--fsdp")
    assert "frozen weight tensors" in done.stderr and "sharded over 2 processes" in done.stderr
    assert "resuming from" in done.stderr and "at step 2" in done.stderr
    _assert_same_run(sharded, dropout_run)


# ------------------------------------------------------------------------------------------------ the pieces
def test_a_window_is_split_by_rank():
    window = range(8, 14)
    shares = [distributed.DataParallel(rank, 3).share(window) for rank in range(3)]
    assert shares == [[8, 11], [9, 12], [10, 13]]
    assert distributed.DataParallel().share(window) == list(window)


def test_token_counts_without_collating(tmp_path, tokenizer):
    config = tiny_config(tmp_path, micro_batch_size=2)
    rows = chat_rows(5)
    examples = [tokenize_row(row, tokenizer, data_format_from_config(config), i) for i, row in enumerate(rows)]
    order = DataOrder(pack_examples(examples, config.max_seq_len, pack=False), 2, 0)
    for position in range(7):  # wraps around the 3 micro-batches
        assert order.num_label_tokens(position) == order.batch(position).num_label_tokens


def test_the_environment_of_a_launch():
    assert distributed.from_environment({}) == distributed.DataParallel(0, 1, 0)
    env = {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"}
    assert distributed.from_environment(env) == distributed.DataParallel(3, 4, 1)
    for bad in ({"WORLD_SIZE": "2", "RANK": "2"}, {"WORLD_SIZE": "two"}):
        with pytest.raises(UsageError, match="launch with torchrun"):
            distributed.from_environment(bad)
    with pytest.raises(UsageError, match="FSDP"):
        distributed.from_environment({"ACCELERATE_USE_FSDP": "true", "WORLD_SIZE": "2", "RANK": "0"})
    with pytest.raises(UsageError, match="MPI launch"):
        distributed.from_environment({"OMPI_COMM_WORLD_SIZE": "2"})
    # accelerate's simple launcher (no --multi_gpu on a machine without GPUs) starts one process for N
    assert distributed.single_process_accelerate_warning({"ACCELERATE_USE_CPU": "False", "MASTER_ADDR": "x"})
    assert distributed.single_process_accelerate_warning({"ACCELERATE_USE_CPU": "False"}) is None


def _exit_2(argv: list[str], capsys) -> str:  # noqa: ANN001
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error: ")
    return err[-1]


def test_launches_and_flags_that_cannot_work_are_refused_with_one_line(tmp_path, monkeypatch, capsys):
    data = str(write_jsonl(tmp_path / "t.jsonl", chat_rows(2)))
    base = ["--train-data", data, "--out", str(tmp_path / "o"), "--device", "cpu"]
    # --fsdp needs several processes and plain weights
    assert "--fsdp shards the frozen backbone over several processes" in _exit_2(base + ["--fsdp"], capsys)
    assert "not 4-bit NF4" in _exit_2(base + ["--fsdp", "--quantize", "nf4"], capsys)
    # accelerate's own FSDP plugin would have its settings ignored: refused before anything loads
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    assert "accelerate launch asked for FSDP (--use_fsdp)" in _exit_2(base, capsys)
    assert not (tmp_path / "o").exists()
