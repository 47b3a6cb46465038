"""A full disk (issue 26): report, probe train, train.codeact_data and record --allow-low-disk stop with one
``error:`` line saying how much space was needed, and leave no partial file.

The disk is a 512 KiB tmpfs filled to the last byte where the machine lets the tests mount one (root); elsewhere
the full disk is simulated by an fsync that fails with ENOSPC, which is where a real full disk often surfaces."""

from __future__ import annotations

import errno
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sst_interp.store import atomic
from sst_interp.synthetic import SyntheticSpec, write_synthetic_run
from tests.unit.conftest import FAST, save_tiny_model
from tests.unit.store.test_store_integrity_cli import SPEC  # a planted halting feature: probe has work to do



def _fill(folder: Path) -> None:
    """Write until the file system refuses another byte."""
    with open(folder / "filler", "wb", buffering=0) as handle:
        for size in (1 << 16, 1 << 10, 1):
            try:
                while True:
                    handle.write(b"\0" * size)
            except OSError as err:
                assert err.errno == errno.ENOSPC


@pytest.fixture
def full_disk(tmp_path, monkeypatch) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)],
                             capture_output=True).returncode == 0 if shutil.which("mount") else False
    if mounted:
        _fill(mount)
    else:
        def no_space(fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(atomic.os, "fsync", no_space)
    try:
        yield mount
    finally:
        if mounted:
            subprocess.run(["umount", str(mount)], check=True)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("synthetic") / "run"
    write_synthetic_run(path, SyntheticSpec(**SPEC))
    return path


def _one_disk_full_line(capsys, out: Path) -> None:
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "disk full writing" in errors[0] and "needs" in errors[0], err
    assert "Traceback" not in err
    partial = [p for p in out.rglob("*") if p.is_file() and p.name != "filler" and p.stat().st_size > 0
               or ".tmp" in p.name]
    assert partial == [], partial


def test_report_on_a_full_disk(run, full_disk, capsys):
    from sst_interp.cli.report import main

    out = full_disk / "report"
    with pytest.raises(SystemExit) as info:
        main(["--run", str(run), "--out", str(out), "--quiet"])
    assert info.value.code == 2
    _one_disk_full_line(capsys, full_disk)


def test_probe_train_on_a_full_disk(run, full_disk, capsys):
    from sst_interp.cli.probe import main

    with pytest.raises(SystemExit) as info:
        main(["train", "--run", str(run), "--out", str(full_disk / "probe")])
    assert info.value.code == 2
    _one_disk_full_line(capsys, full_disk)


def test_codeact_data_on_a_full_disk(full_disk, tmp_path, capsys):
    from sst_interp.cli.codeact_data import main

    data = Path(__file__).parents[1] / "data" / "gsm8k_tiny.jsonl"
    with pytest.raises(SystemExit) as info:
        main(["--gsm8k", str(data), "--out", str(full_disk / "traces"), "--sandbox", "subprocess"])
    assert info.value.code == 2
    _one_disk_full_line(capsys, full_disk)


@pytest.mark.usefixtures("one_thread")
def test_record_allow_low_disk_on_a_full_disk(full_disk, tmp_path, capsys):
    from sst_interp.cli.record import main

    model = save_tiny_model(tmp_path / "model")
    with pytest.raises(SystemExit) as info:
        main(FAST + ["--model", str(model), "--out", str(full_disk / "run"), "--depths", "1", "--limit", "2",
                     "--demo-preset", "--allow-low-disk"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "disk full" in errors[0] and "Traceback" not in err, err
