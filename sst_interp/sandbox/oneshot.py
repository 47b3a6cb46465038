"""One program, one sandbox, one verdict: :func:`run_program` (HumanEval grading).

The program runs as one block of a fresh :class:`~sst_interp.sandbox.session.PythonSession`, as a script named
``program.py`` in its own ``__main__`` with the socket constructors disabled as well. It passes only when the
interpreter's driver reports that the program ran to its end (``exec`` returned) within ``timeout_s``: the
exit status plays no part, so ``os._exit(0)``, ``sys.exit(0)``, an ``atexit`` hook or a replaced
``sys.excepthook`` after a failed check fail. The report carries a nonce the program never sees in a form it
could replay, through a channel only the supervisor reads (:mod:`~sst_interp.sandbox.supervisor`).

A sandbox that cannot start is not a verdict: :class:`~sst_interp.sandbox.process.SandboxError` is raised,
so the answer is never graded.
"""

from __future__ import annotations

from dataclasses import dataclass

from sst_interp.sandbox.config import SandboxConfig
from sst_interp.sandbox.session import PythonSession

REASON_CHARS = 200


@dataclass(frozen=True)
class ExecutionResult:
    """Outcome of running one program.

    Args:
        passed: the program ran to its end within the time limit.
        status: ``"passed"``, ``"timeout after N s"`` or ``"failed: <last line of stderr>"`` (the last line
            of a traceback, or the ``[sandbox]`` note when the interpreter died).
    """

    passed: bool
    status: str


def run_program(program: str, config: SandboxConfig | None = None) -> ExecutionResult:
    """Run Python source ``program`` in a sandbox described by ``config`` (default :class:`SandboxConfig`).

    Raises:
        UsageError: the backend cannot run here.
        SandboxError: the sandbox itself failed to start (never graded as a wrong answer).
    """
    config = config if config is not None else SandboxConfig()
    with PythonSession(config) as session:
        result = session._run(program, program=True)
        death = session.last_death
    if result.status == "ok":
        return ExecutionResult(True, "passed")
    if result.status == "timeout":
        return ExecutionResult(False, f"timeout after {config.timeout_s:g} s")
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    if death is not None:
        reason = f"{death}: the program did not run to its end"
    else:
        reason = lines[-1] if lines else "the program did not run to its end"
    return ExecutionResult(False, f"failed: {reason[:REASON_CHARS]}")
