"""Host-side sandbox folders live in one parent per process; a process killed without cleaning up leaves that
parent, and the next process that starts a sandbox removes it (never a live process's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sst_interp.sandbox import tempdirs
from sst_interp.sandbox.output import CaptureFiles
from sst_interp.sandbox.process import make_workdir, remove_workdir


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_dead_process_parent_is_swept_and_a_live_one_kept(tmp_path):
    dead = tmp_path / f"{tempdirs.PREFIX}{_dead_pid()}"
    (dead / "sst_interp_exec_x" / "deep").mkdir(parents=True)
    (dead / "sst_interp_io_y").mkdir()
    (dead / "sst_interp_io_y" / "stdout").write_text("left by kill -9")
    live = tmp_path / f"{tempdirs.PREFIX}{os.getpid()}"
    (live / "sst_interp_exec_z").mkdir(parents=True)
    other = tmp_path / "sst_interp_sandbox_notapid"
    other.mkdir()
    assert tempdirs.sweep_stale(tmp_path) == [dead]
    assert not dead.exists() and live.is_dir() and other.is_dir()


def test_sandbox_folders_are_made_inside_this_process_parent():
    parent = tempdirs.process_parent()
    assert parent.name == f"{tempdirs.PREFIX}{os.getpid()}" and oct(parent.stat().st_mode & 0o777) == "0o711"
    workdir = Path(make_workdir())
    capture = CaptureFiles()
    try:
        assert workdir.parent == parent and capture.directory.parent == parent
    finally:
        remove_workdir(str(workdir))
        capture.close()


def test_a_killed_recording_leaves_nothing_behind_after_the_next_sandbox_starts(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    code = ("import os, signal\nfrom sst_interp.sandbox.process import make_workdir\nfrom sst_interp.sandbox.output "
            "import CaptureFiles\nmake_workdir(); CaptureFiles()\nos.kill(os.getpid(), signal.SIGKILL)\n")
    killed = subprocess.run([sys.executable, "-c", code], env=env)
    assert killed.returncode == -9
    left = [p for p in tmp_path.iterdir() if p.name.startswith(tempdirs.PREFIX)]
    assert len(left) == 1 and any(left[0].iterdir())  # what kill -9 leaves
    again = subprocess.run([sys.executable, "-c", "from sst_interp.sandbox.tempdirs import process_parent\n"
                            "print(process_parent())"], env=env, capture_output=True, text=True)
    assert again.returncode == 0 and again.stdout.strip()
    assert list(tmp_path.iterdir()) == []  # the stale parent swept; the new process's own, empty, removed at exit


def test_a_sandbox_that_cannot_start_stops_a_command_with_one_error_line(capsys):
    import pytest

    from sst_interp.kernels.errors import cli_entry
    from sst_interp.sandbox import SandboxError

    @cli_entry
    def command() -> None:
        raise SandboxError("the sandbox did not start (exit 1): bwrap: setting up uid map:\nPermission denied")

    with pytest.raises(SystemExit) as info:
        command()
    err = capsys.readouterr().err.splitlines()
    assert info.value.code == 2 and len(err) == 1
    assert err[0] == "error: the sandbox did not start (exit 1): bwrap: setting up uid map: Permission denied"
    assert issubclass(SandboxError, RuntimeError)  # callers that caught it as a RuntimeError still do
