"""Resolving the report's inputs, and the CLI's one-line errors (exit 2) on bad input."""

from __future__ import annotations

import os

import pytest

from sst_interp.kernels.errors import UsageError
from sst_interp.cli.report import main
from sst_interp.reporting.config import ReportConfig
from sst_interp.reporting.inputs import expand_run_paths, latest_run, resolve_inputs, resolve_training_logs
from tests.unit.reporting.builders import theta_matrix, write_checkpoint, write_tiny_run, write_training_logs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """runs/old and runs/new (new's manifest is newer), plus a baseline sharing their question ids."""
    root = tmp_path_factory.mktemp("cfg")
    write_tiny_run(root / "runs" / "old", seed=1)
    write_tiny_run(root / "runs" / "new", seed=2)
    write_tiny_run(root / "base", depths=(1,), seed=3)
    old, new = root / "runs" / "old" / "manifest.json", root / "runs" / "new" / "manifest.json"
    os.utime(old, (1_000_000, 1_000_000))
    os.utime(new, (2_000_000, 2_000_000))
    return root


def test_latest_run_and_folder_expansion(runs):
    assert latest_run(runs / "runs") == runs / "runs" / "new"
    assert expand_run_paths((), runs / "runs") == [runs / "runs" / "new"]
    assert expand_run_paths((runs / "runs",), runs / "runs") == [runs / "runs" / "new", runs / "runs" / "old"]
    with pytest.raises(UsageError, match="no run directory under"):
        latest_run(runs / "base" / "hidden")
    with pytest.raises(UsageError, match="does not exist"):
        latest_run(runs / "nothing")


def test_resolve_pairs_baseline_by_shared_questions_and_excludes_it_from_runs(runs, tmp_path):
    inputs = resolve_inputs(ReportConfig(runs=(runs / "runs",), baselines=(runs / "base",), out=tmp_path))
    assert [r.name for r in inputs.runs] == ["new", "old"]
    assert {name: b.path for name, b in inputs.baselines.items()} == {"new": runs / "base", "old": runs / "base"}
    assert inputs.checkpoints == {}
    assert "names no SST checkpoint" in inputs.missing_checkpoints["new"]
    # a baseline inside the runs folder is not also an SST run
    inputs = resolve_inputs(ReportConfig(runs=(runs / "runs",), baselines=(runs / "runs" / "old",), out=tmp_path))
    assert [r.name for r in inputs.runs] == ["new"]


def test_checkpoint_and_training_logs(runs, tmp_path):
    ckpt = write_checkpoint(tmp_path / "ckpt", theta_matrix())
    sst, base = write_training_logs(tmp_path)
    inputs = resolve_inputs(ReportConfig(runs=(runs / "runs" / "new",), checkpoint=ckpt,
                                         training_logs=(base / "train_log.csv", sst), out=tmp_path))
    assert inputs.checkpoints == {"new": ckpt}
    assert (inputs.training.sst, inputs.training.baseline) == (sst, base)
    with pytest.raises(UsageError, match="two SST training logs"):
        resolve_training_logs((sst, sst))
    with pytest.raises(UsageError, match="is not an SST checkpoint folder"):
        resolve_inputs(ReportConfig(runs=(runs / "runs" / "new",), checkpoint=tmp_path, out=tmp_path))


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    return err[0]


def test_cli_bad_inputs_exit_2_with_one_line(runs, tmp_path, capsys):
    cases = [
        (["--run", str(tmp_path / "missing")], "does not exist"),
        (["--run", str(runs / "base" / "hidden")], "is not a run directory"),
        (["--run", str(runs / "runs" / "new"), "--only", "tab_nothing_like_this"], "matches no artefact"),
        (["--run", str(runs / "runs" / "new"), "--training-log", str(tmp_path)], "neither a train_log.csv"),
        (["--run", str(runs / "runs" / "new"), "--probe", str(tmp_path / "no_probe")], "--probe"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exit_info:
            main([*argv, "--out", str(tmp_path / "out"), "--quiet"])
        assert exit_info.value.code == 2
        assert message in _one_error_line(capsys)


def test_cli_corrupt_shard_names_the_file(tmp_path, capsys):
    run = tmp_path / "run"
    write_tiny_run(run)
    shard = next((run / "logits").rglob("*.parquet"))
    shard.write_bytes(shard.read_bytes()[:-40])
    with pytest.raises(SystemExit) as exit_info:
        main(["--run", str(run), "--out", str(tmp_path / "out"), "--quiet"])
    assert exit_info.value.code == 2
    line = _one_error_line(capsys)
    assert shard.name in line and "truncated" in line


def test_cli_without_arguments_reports_the_latest_run(runs, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(runs)
    assert main(["--only", "tab_staged_breakdown", "--out", str(tmp_path / "out"), "--quiet"]) == 0
    page = (tmp_path / "out" / "index.html").read_text()
    assert "<td>runs/new</td>" in page and "runs/old" not in page
    assert (tmp_path / "out" / "tab_staged_breakdown.csv").is_file()
    assert "wrote 1 artefacts" in capsys.readouterr().out
