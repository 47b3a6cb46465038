"""Running HumanEval-style code: prompt + completion + test + ``check(entry_point)`` in a sandbox.

The program runs through :func:`sst_interp.sandbox.run_program`: by default in a bubblewrap sandbox (an allow list
of read-only system paths, no network, its own PID namespace, a seccomp filter, rlimits; see
:mod:`sst_interp.sandbox`), as a script named ``program.py`` in a fresh private tmpfs that is its working
directory and ``HOME``. The socket constructors are disabled as well, so a program that tries the network fails
with ``OSError("network access is disabled ...")``. The program passes only when it ran to its end within the
time limit (the driver reports that ``exec`` returned; the exit status plays no part, so ``os._exit(0)`` or
``sys.exit(0)`` after a failed check fail). Without ``bwrap`` on ``PATH`` this raises a one-line
:class:`~sst_interp.kernels.errors.UsageError`; a sandbox that cannot start raises
:class:`~sst_interp.sandbox.SandboxError` (never a graded failure). Pass
``sandbox=SandboxConfig(backend="subprocess")`` to run without isolation (unsafe for untrusted code).
"""

from __future__ import annotations

from sst_interp.sandbox import ExecutionResult, SandboxConfig
from sst_interp.sandbox import run_program as run_in_sandbox

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MEMORY_MB = 4096

__all__ = ["DEFAULT_MEMORY_MB", "DEFAULT_TIMEOUT_S", "ExecutionResult", "humaneval_program", "run_program"]


def run_program(program: str, timeout_s: float = DEFAULT_TIMEOUT_S, memory_mb: int = DEFAULT_MEMORY_MB,
                sandbox: SandboxConfig | None = None) -> ExecutionResult:
    """Run Python source ``program`` in a sandbox; ``sandbox`` (if given) replaces ``timeout_s``/``memory_mb``.

    Returns:
        :class:`~sst_interp.sandbox.ExecutionResult`: ``passed`` and ``status`` (``passed``,
        ``timeout after N s`` or ``failed: <last line of stderr>``).

    Raises:
        SandboxError: the sandbox itself could not start.
    """
    config = sandbox if sandbox is not None else SandboxConfig(timeout_s=timeout_s, memory_mb=memory_mb)
    return run_in_sandbox(program, config)


def humaneval_program(prompt: str, completion: str, check_code: str) -> str:
    """The program that tests a completion: the task prompt, the completion, then the check code."""
    return f"{prompt}{completion}\n\n{check_code}"
