"""Bad output paths and empty input: one ``error:`` line, exit code 2, nothing written (issue 12's list)."""

from __future__ import annotations

import json

import pytest

from sst_interp.cli.generate import main as generate_main
from sst_interp.cli.report import main as report_main
from sst_interp.cli.train import main as train_main


def _one_line_exit_2(call, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        call()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error: ") and not any("Traceback" in line for line in err)
    return err[-1]


def test_report_out_a_file_or_unwritable(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert "is a file, not a folder" in _one_line_exit_2(
        lambda: report_main(["--run", str(tmp_path), "--out", str(blocker)]), capsys)
    assert "lies under" in _one_line_exit_2(
        lambda: report_main(["--run", str(tmp_path), "--out", str(blocker / "sub")]), capsys)


def test_train_demo_out_a_file(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert "is a file, not a folder" in _one_line_exit_2(lambda: train_main(["--demo", "--out", str(blocker)]), capsys)


def test_train_with_a_bad_model_writes_nothing(tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"prompt": "1 + 1 =", "completion": " 2"}) + "\n")
    out = tmp_path / "run"
    message = _one_line_exit_2(lambda: train_main(["--model", str(tmp_path / "no-model"), "--train-data", str(data),
                                                   "--out", str(out)]), capsys)
    assert "could not load model" in message
    assert not out.exists()


def test_generate_empty_prompt(capsys):
    assert "--prompt is empty" in _one_line_exit_2(lambda: generate_main(["--prompt", "  "]), capsys)
