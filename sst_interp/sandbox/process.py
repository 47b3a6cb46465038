"""One sandboxed process: start it under a backend, wait for it with a deadline, kill everything it started.

Both backends run the same two programs: :mod:`~sst_interp.sandbox.bootstrap` (privileges, namespace,
rlimits) which execs :mod:`~sst_interp.sandbox.driver` (the code runner). Their sources are read from this
package and passed with ``-c``, since the package is not visible inside the sandbox.

Teardown: the bwrap backend kills the outer ``bwrap`` process and the sandbox's init (PID 1 of its PID
namespace, whose host pid bwrap reports through ``--info-fd``); when that init dies the kernel kills every
process in the namespace, including children that called ``setsid()``. The init's pidfd becomes readable only
once the kernel has reaped all of them, and :meth:`SandboxProcess.kill` waits for that, so nothing of the
sandbox runs when it returns. The subprocess backend can only kill the process group of the bootstrap:
children that left it survive (one reason that backend is unsafe).
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
import warnings
from collections.abc import Sequence
from pathlib import Path

from sst_interp.kernels.errors import UsageError
from sst_interp.sandbox.bwrap import SANDBOX_DIR, SANDBOX_GID, SANDBOX_UID, bwrap_argv, find_bwrap
from sst_interp.sandbox.cgroup import SandboxCgroup, memory_cap
from sst_interp.sandbox.config import SandboxConfig
from sst_interp.sandbox.interpreter import base_interpreter, sandbox_env
from sst_interp.sandbox.limits import rlimits
from sst_interp.sandbox.output import CaptureFiles
from sst_interp.sandbox.seccomp import filter_fd, mount_filter_program
# the supervisor's own wording, so a sandbox that dies outside it is described the same way as one inside
from sst_interp.sandbox.supervisor import describe_status
from sst_interp.sandbox.tempdirs import process_parent

_HERE = Path(__file__).resolve().parent
BOOTSTRAP_SOURCE = (_HERE / "bootstrap.py").read_text(encoding="utf-8")
DRIVER_SOURCE = (_HERE / "driver.py").read_text(encoding="utf-8")
SUPERVISOR_SOURCE = (_HERE / "supervisor.py").read_text(encoding="utf-8")
SETUP_FAILURE_STATUS = 125  # the bootstrap's exit status when a setup step failed
MIB = 1024 * 1024
INFO_TIMEOUT_S = 30.0  # bwrap reports its init's pid at once; this only bounds a hang
NAMESPACE_EXIT_TIMEOUT_S = 10.0  # the kernel reaps a killed namespace in milliseconds


class SandboxError(UsageError, RuntimeError):
    """The sandbox could not start (the message carries the backend's own error text).

    A :class:`~sst_interp.kernels.errors.UsageError`: the machine cannot run the sandbox (bwrap refused, a namespace it
    may not create), which the user fixes, so a command stops with one ``error:`` line and exit 2, never a
    traceback and never a graded answer.
    """


def make_workdir() -> str:
    """A new private directory for one sandbox, writable by the uid the sandboxed code runs as."""
    path = tempfile.mkdtemp(prefix="sst_interp_exec_", dir=process_parent())
    if os.geteuid() == 0:
        # a root caller's sandbox runs as "nobody" (bootstrap); it must own the one writable directory
        os.chown(path, SANDBOX_UID, SANDBOX_GID)
    return path


def remove_workdir(path: str) -> None:
    """Remove a sandbox directory, even where the code took away its own permissions on it; never raises.

    Called only once every process of the sandbox is gone, so nothing adds files meanwhile. Root needs no
    permissions. Anyone else first gets back ``rwx`` on every directory; symlinks are skipped, since
    ``chmod`` would follow them to whatever host file the code pointed them at. What cannot be removed is
    reported as a warning (the caller's run must go on; a leftover directory is no reason to lose it).
    """
    failures: list[str] = []

    def record(_function: object, failed_path: str, exc_info: object) -> None:
        failures.append(f"{failed_path}: {exc_info[1] if isinstance(exc_info, tuple) else exc_info}")

    try:
        if os.geteuid() != 0:
            os.chmod(path, stat.S_IRWXU)
            for root, dirs, _files in os.walk(path):
                for name in dirs:
                    child = os.path.join(root, name)
                    if not os.path.islink(child):
                        os.chmod(child, stat.S_IRWXU)
    except OSError as err:
        failures.append(f"chmod: {err}")
    shutil.rmtree(path, onerror=record)
    if failures:
        warnings.warn(f"sandbox directory {path} not fully removed: {failures[0]}", RuntimeWarning, stacklevel=2)


def _read_info(fd: int, deadline: float) -> dict:
    """bwrap's ``--info-fd`` JSON (``{"child-pid": N, ...}``), read until bwrap closes the pipe."""
    data = bytearray()
    while True:
        readable, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not readable:
            raise SandboxError("bwrap did not report its sandbox's pid in time")
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SandboxError(f"bwrap reported no sandbox pid ({bytes(data[:200])!r})") from err


def _make_cgroup(config: SandboxConfig) -> SandboxCgroup | None:
    """The sandbox's memory cgroup (``memory.max`` = ``config.memory_mb`` for all its processes together), or None
    where the host delegates no memory controller (:mod:`~sst_interp.sandbox.cgroup`)."""
    cap = memory_cap()
    if cap.parent is None:
        return None
    try:
        return SandboxCgroup(cap.parent, config.memory_mb)
    except OSError as err:
        raise SandboxError(f"could not make the sandbox's memory cgroup under {cap.parent} ({err.strerror}); "
                           f"unset $SST_INTERP_SANDBOX_CGROUP or delegate that cgroup to this user") from err


class SandboxProcess:
    """A started sandbox: the ``Popen`` of its outermost process and, for sessions, the control pipes.

    Attributes:
        popen: the process this side started (``bwrap`` or, for the subprocess backend, the bootstrap).
        command_fd: write end of the command pipe (sessions), else None.
        result_fd: read end of the result pipe (sessions), else None.
        exit_fd: a pidfd of ``popen`` (readable once it exits, before it is reaped), or None where the
            platform has none.
        init_fd: a pidfd of the sandbox's init, PID 1 of its namespace (bwrap backend), else None.
    """

    def __init__(self, config: SandboxConfig, popen: subprocess.Popen, command_fd: int | None,
                 result_fd: int | None) -> None:
        self.config = config
        self.popen = popen
        self.command_fd = command_fd
        self.result_fd = result_fd
        self.exit_fd = os.pidfd_open(popen.pid) if hasattr(os, "pidfd_open") else None
        self.init_fd: int | None = None  # pidfd of the sandbox's init (bwrap backend)
        self.cgroup: SandboxCgroup | None = None  # the sandbox's memory cgroup, where the host delegates one

    @classmethod
    def launch(cls, config: SandboxConfig, workdir: str, capture: CaptureFiles, driver_args: Sequence[str],
               channel: bool) -> SandboxProcess:
        """Start a sandbox: the supervisor (``channel``: it gets the two control pipes; ``driver_args`` are
        ignored) or the driver with ``driver_args`` (``probe``)."""
        interpreter = base_interpreter()
        bwrap = config.backend == "bwrap"
        child_fds: list[int] = []
        command_fd = result_fd = info_read = None
        driver = [interpreter.executable, "-s", "-u", "-c", DRIVER_SOURCE]
        if channel:
            command_read, command_fd = os.pipe()
            result_fd, result_write = os.pipe()
            child_fds = [command_read, result_write]
            supervisor_spec = {"interpreter": [*driver, "session"], "pid_namespace": bwrap,
                               "cpu_seconds": config.cpu_seconds}
            program = [interpreter.executable, "-s", "-u", "-c", SUPERVISOR_SOURCE, str(command_read),
                       str(result_write), json.dumps(supervisor_spec)]
        else:
            program = [*driver, *driver_args]
        # bwrap: the working directory is the sandbox's own tmpfs, not the host directory
        inside = SANDBOX_DIR if bwrap else workdir
        spec = {
            "drop_to": [SANDBOX_UID, SANDBOX_GID] if bwrap and os.geteuid() == 0 else None,
            "cwd": inside,
            "new_userns": bwrap,
            "workdir_tmpfs": {"size": config.tmp_mb * MIB, "inodes": config.max_inodes} if bwrap else None,
            "seccomp_hex": mount_filter_program().hex() if bwrap else "",
            "rlimits": rlimits(config, process_limit=bwrap),
            "argv": program,
        }
        command = [interpreter.executable, "-I", "-c", BOOTSTRAP_SOURCE, json.dumps(spec)]
        group = _make_cgroup(config)
        try:
            if bwrap:
                bwrap_path = find_bwrap()
                if bwrap_path is None:
                    raise SandboxError("bwrap is not on PATH")
                info_read, info_write = os.pipe()
                child_fds.append(info_write)
                seccomp_fd = filter_fd()
                child_fds.append(seccomp_fd)
                argv = bwrap_argv(bwrap_path, config, interpreter, inside, os.geteuid() == 0, command)
                argv[1:1] = ["--info-fd", str(info_write), "--seccomp", str(seccomp_fd)]
                if group is not None:
                    argv = group.wrap(argv)
                # bwrap itself gets a bare environment: the caller's variables must not reach any process
                # of the sandbox (bwrap's own init keeps the environment it was started with)
                popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=capture.stdout_fd,
                                         stderr=capture.stderr_fd, pass_fds=child_fds, cwd="/",
                                         env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
            else:
                popen = subprocess.Popen(command if group is None else group.wrap(command),
                                         stdin=subprocess.DEVNULL, stdout=capture.stdout_fd,
                                         stderr=capture.stderr_fd, pass_fds=child_fds, cwd=workdir,
                                         env=sandbox_env(interpreter, workdir), start_new_session=True)
        except BaseException:
            for fd in (*child_fds, command_fd, result_fd, info_read):
                if fd is not None:
                    os.close(fd)
            if group is not None:
                group.remove()
            raise
        for fd in child_fds:
            os.close(fd)  # the child holds them now; our copies would hide its end of file
        for fd in (command_fd, result_fd):
            if fd is not None:
                os.set_blocking(fd, False)
        process = cls(config, popen, command_fd, result_fd)
        process.cgroup = group
        if info_read is not None:
            try:
                info = _read_info(info_read, time.monotonic() + INFO_TIMEOUT_S)
                if isinstance(info.get("child-pid"), int):
                    process.init_fd = os.pidfd_open(info["child-pid"])
            except (SandboxError, OSError) as err:
                process.close()
                _, stderr = capture.read(2000)
                raise SandboxError(f"the sandbox did not start ({err}; {process.exit_reason()}): "
                                   f"{' '.join(stderr.split())}") from err
            finally:
                os.close(info_read)
        return process

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
        if self.init_fd is not None:
            try:
                signal.pidfd_send_signal(self.init_fd, signal.SIGKILL)
            except ProcessLookupError:
                pass  # it is already gone
            # readable once the init has exited, which the kernel allows only after every process of the
            # namespace is gone
            readable, _, _ = select.select([self.init_fd], [], [], NAMESPACE_EXIT_TIMEOUT_S)
            if not readable:
                # not raised: the caller's run must go on; the kernel finishes the kill on its own
                warnings.warn(f"the sandbox's processes did not end within {NAMESPACE_EXIT_TIMEOUT_S:g} s",
                              RuntimeWarning, stacklevel=2)

    def close(self) -> None:
        """Kill (if still running), close every descriptor and remove the sandbox's cgroup."""
        self.kill()
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        for name in ("command_fd", "result_fd", "exit_fd", "init_fd"):
            fd = getattr(self, name)
            setattr(self, name, None)  # first, so a second close never closes a reused descriptor number
            if fd is not None:
                os.close(fd)

    def exit_reason(self) -> str:
        """How the process ended, in words (call after :meth:`kill`, which reaps it)."""
        code = self.popen.returncode
        if code is not None and self.config.backend == "bwrap" and code > 128:
            code = 128 - code  # bwrap exits 128 + N when its child died of signal N: read it as Popen's -N
        return describe_status(code, self.config.cpu_seconds)
