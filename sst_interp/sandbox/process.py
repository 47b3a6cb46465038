"""One sandboxed process: start it under a backend, wait for it with a deadline, kill everything it started.

Both backends run the same two programs: :mod:`~sst_interp.sandbox.bootstrap` (privileges, namespace,
rlimits) which execs :mod:`~sst_interp.sandbox.driver` (the code runner). Their sources are read from this
package and passed with ``-c``, since the package is not visible inside the sandbox.

Teardown: the bwrap backend kills the outer ``bwrap`` process; ``--die-with-parent`` makes the kernel kill
the sandbox's init (PID 1 of its PID namespace), and when that init dies the kernel kills every process in
the namespace, including children that called ``setsid()``. (That init, orphaned by the kill, is reaped by the
host's init, as any orphan.) The subprocess backend can only kill the
process group of the driver: children that left it survive (one reason that backend is unsafe).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from sst_interp.sandbox.bwrap import SANDBOX_GID, SANDBOX_UID, bwrap_argv, find_bwrap
from sst_interp.sandbox.config import SandboxConfig
from sst_interp.sandbox.interpreter import base_interpreter, sandbox_env
from sst_interp.sandbox.limits import rlimits
from sst_interp.sandbox.output import CaptureFiles

_HERE = Path(__file__).resolve().parent
BOOTSTRAP_SOURCE = (_HERE / "bootstrap.py").read_text(encoding="utf-8")
DRIVER_SOURCE = (_HERE / "driver.py").read_text(encoding="utf-8")
SETUP_FAILURE_STATUS = 125  # the bootstrap's exit status when a setup step failed


class SandboxError(RuntimeError):
    """The sandbox could not start (the message carries the backend's own error text)."""


def make_workdir() -> str:
    """A new private directory for one sandbox, writable by the uid the sandboxed code runs as."""
    path = tempfile.mkdtemp(prefix="sst_interp_exec_")
    if os.geteuid() == 0:
        # a root caller's sandbox runs as "nobody" (bootstrap); it must own the one writable directory
        os.chown(path, SANDBOX_UID, SANDBOX_GID)
    return path


def remove_workdir(path: str) -> None:
    """Remove a sandbox directory, even where the code took away its own permissions on it.

    Root needs no permissions. Anyone else first gets back ``rwx`` on every directory; symlinks are
    skipped, since ``chmod`` would follow them to whatever host file the code pointed them at.
    """
    if os.geteuid() != 0:
        os.chmod(path, stat.S_IRWXU)
        for root, dirs, _files in os.walk(path):
            for name in dirs:
                child = os.path.join(root, name)
                if not os.path.islink(child):
                    os.chmod(child, stat.S_IRWXU)
    shutil.rmtree(path)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class SandboxProcess:
    """A started sandbox: the ``Popen`` of its outermost process and, for sessions, the control pipes.

    Attributes:
        popen: the process this side started (``bwrap`` or, for the subprocess backend, the bootstrap).
        command_fd: write end of the command pipe (sessions), else None.
        result_fd: read end of the result pipe (sessions), else None.
        exit_fd: a pidfd of ``popen`` (readable once it exits, before it is reaped), or None where the
            platform has none.
    """

    def __init__(self, config: SandboxConfig, popen: subprocess.Popen, command_fd: int | None,
                 result_fd: int | None) -> None:
        self.config = config
        self.popen = popen
        self.command_fd = command_fd
        self.result_fd = result_fd
        self.exit_fd = os.pidfd_open(popen.pid) if hasattr(os, "pidfd_open") else None

    @classmethod
    def launch(cls, config: SandboxConfig, workdir: str, capture: CaptureFiles, driver_args: Sequence[str],
               channel: bool) -> SandboxProcess:
        """Start the driver with ``driver_args`` (after the mode; ``channel`` adds the two pipe fds)."""
        interpreter = base_interpreter()
        bwrap = config.backend == "bwrap"
        child_fds: list[int] = []
        command_fd = result_fd = None
        args = list(driver_args)
        if channel:
            command_read, command_fd = os.pipe()
            result_fd, result_write = os.pipe()
            child_fds = [command_read, result_write]
            args += [str(command_read), str(result_write)]
        driver = [interpreter.executable, "-s", "-u", "-c", DRIVER_SOURCE, *args]
        spec = {
            "drop_to": [SANDBOX_UID, SANDBOX_GID] if bwrap and os.geteuid() == 0 else None,
            "cwd": workdir,
            "new_userns": bwrap,
            "rlimits": rlimits(config, process_limit=bwrap),
            "argv": driver,
        }
        command = [interpreter.executable, "-I", "-c", BOOTSTRAP_SOURCE, json.dumps(spec)]
        try:
            if bwrap:
                bwrap_path = find_bwrap()
                if bwrap_path is None:
                    raise SandboxError("bwrap is not on PATH")
                argv = bwrap_argv(bwrap_path, config, interpreter, workdir, os.geteuid() == 0, command)
                # bwrap itself gets a bare environment: the caller's variables must not reach any process
                # of the sandbox (bwrap's own init keeps the environment it was started with)
                popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=capture.stdout_fd,
                                         stderr=capture.stderr_fd, pass_fds=child_fds, cwd="/",
                                         env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
            else:
                popen = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=capture.stdout_fd,
                                         stderr=capture.stderr_fd, pass_fds=child_fds, cwd=workdir,
                                         env=sandbox_env(interpreter, workdir), start_new_session=True)
        except BaseException:
            for fd in (*child_fds, command_fd, result_fd):
                if fd is not None:
                    os.close(fd)
            raise
        for fd in child_fds:
            os.close(fd)  # the child holds them now; our copies would hide its end of file
        for fd in (command_fd, result_fd):
            if fd is not None:
                os.set_blocking(fd, False)
        return cls(config, popen, command_fd, result_fd)

    def wait_exit(self, timeout: float) -> bool:
        """Whether the process ended within ``timeout`` seconds (it is not reaped, so its pid stays ours)."""
        if self.exit_fd is not None:
            readable, _, _ = select.select([self.exit_fd], [], [], max(0.0, timeout))
            return bool(readable)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = os.waitid(os.P_PID, self.popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if result is not None:
                return True
            time.sleep(0.01)
        return False

    def kill(self) -> None:
        """Kill every process of the sandbox (module docstring), then reap the one we started."""
        if self.popen.returncode is None:
            if self.config.backend == "subprocess":
                try:
                    # not reaped yet, so the group id cannot belong to anyone else
                    os.killpg(self.popen.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass  # the group is already empty
            else:
                self.popen.kill()
            self.popen.wait()

    def close(self) -> None:
        """Kill (if still running) and close every descriptor."""
        self.kill()
        for name in ("command_fd", "result_fd", "exit_fd"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)

    def exit_reason(self) -> str:
        """How the process ended, in words (call after :meth:`kill`, which reaps it)."""
        code = self.popen.returncode
        if code is None:
            return "still running"
        number = -code if code < 0 else (code - 128 if self.config.backend == "bwrap" and code > 128 else 0)
        if number:
            name = _signal_name(number)
            if number == signal.SIGKILL:
                return f"killed by {name} (memory exhausted, the CPU limit of {self.config.cpu_seconds} s, or a kill)"
            if number == signal.SIGXCPU:
                return f"killed by {name} (the CPU limit of {self.config.cpu_seconds} s)"
            return f"killed by {name}"
        return f"exited with status {code}"
