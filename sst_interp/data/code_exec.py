"""HumanEval grading by execution: prompt + completion + test + ``check(entry_point)`` in a subprocess.

The program runs in a fresh ``python -I`` (isolated mode: no user site, no ``PYTHON*``
variables) whose working directory and ``HOME`` are a new temporary directory, removed
afterwards. Before the program runs, a bootstrap in the child replaces the socket
constructors and resolvers (``socket.socket``, ``create_connection``, ``socketpair``,
``getaddrinfo``, ``fromfd``) with functions that raise ``OSError``, so the program cannot open
network connections through Python's standard library, and (on POSIX) caps its address
space with ``RLIMIT_AS``. The whole process group is killed when the time limit passes.

This is a guard against accidents, not a security sandbox: run untrusted model code in a
container if that matters.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MEMORY_MB = 4096

_BOOTSTRAP = """\
import socket, sys

def _no_network(*args, **kwargs):
    raise OSError("network access is disabled while grading")

for _name in ("socket", "create_connection", "socketpair", "getaddrinfo", "fromfd", "create_server"):
    setattr(socket, _name, _no_network)

if sys.platform != "win32":
    import resource
    _limit = int(sys.argv[2]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (_limit, _limit))

_path = sys.argv[1]
sys.argv = [_path]
with open(_path, encoding="utf-8") as _handle:
    _source = _handle.read()
exec(compile(_source, _path, "exec"), {"__name__": "__main__", "__file__": _path})
"""


@dataclass(frozen=True)
class ExecutionResult:
    """Outcome of running one program.

    Args:
        passed: the program exited with status 0 within the time limit.
        status: ``"passed"``, ``"timeout after N s"`` or ``"failed: <last line of stderr>"``.
    """

    passed: bool
    status: str


def run_program(
    program: str, timeout_s: float = DEFAULT_TIMEOUT_S, memory_mb: int = DEFAULT_MEMORY_MB
) -> ExecutionResult:
    """Run Python source ``program`` in an isolated subprocess (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="sst_interp_exec_") as workdir:
        program_path = Path(workdir) / "program.py"
        program_path.write_text(program, encoding="utf-8")
        env = {"PATH": os.environ.get("PATH", ""), "HOME": workdir, "TMPDIR": workdir, "PYTHONHASHSEED": "0"}
        command = [sys.executable, "-I", "-c", _BOOTSTRAP, str(program_path), str(memory_mb)]
        process = subprocess.Popen(
            command,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=(os.name == "posix"),
        )
        try:
            _, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill(process)
            process.communicate()
            return ExecutionResult(False, f"timeout after {timeout_s:g} s")
    if process.returncode == 0:
        return ExecutionResult(True, "passed")
    lines = [line for line in stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    reason = lines[-1].strip() if lines else f"exit status {process.returncode}"
    return ExecutionResult(False, f"failed: {reason[:200]}")


def _kill(process: subprocess.Popen) -> None:
    """Kill ``process`` and, on POSIX, every process in its session."""
    if os.name == "posix":
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            return  # already gone
    else:
        process.kill()


def humaneval_program(prompt: str, completion: str, check_code: str) -> str:
    """The program that tests a completion: the task prompt, the completion, then the check code."""
    return f"{prompt}{completion}\n\n{check_code}"
