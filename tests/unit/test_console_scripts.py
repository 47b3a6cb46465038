"""Every console script: --help exits 0, a bad flag is one error: line and exit 2, and a successful run exits 0
(sst-record used to exit 1 after a good run, because its main returns the accuracies)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.unit.conftest import FAST, save_tiny_model

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])
BIN = Path(sys.executable).parent


def _run(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_is_exit_0_and_a_bad_flag_is_one_error_line_and_exit_2(script):
    path = BIN / script
    assert path.is_file(), f"{script} is not installed next to {sys.executable}: pip install -e ."
    assert _run(str(path), "--help").returncode == 0
    bad = _run(str(path), "--no-such-flag")
    errors = [line for line in bad.stderr.splitlines() if line.startswith("error: ")]
    assert bad.returncode == 2 and len(errors) == 1 and "Traceback" not in bad.stderr, bad.stderr


def test_a_successful_record_exits_0(tmp_path):
    model = save_tiny_model(tmp_path / "model")
    done = _run(str(BIN / "sst-record"), *FAST, "--model", str(model), "--out", str(tmp_path / "run"), "--depths",
                "1", "--limit", "2", "--demo-preset", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "run" / "manifest.json").is_file()
