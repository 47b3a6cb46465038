"""One program, one sandbox, one verdict: :func:`run_program` (HumanEval grading).

The program is written to ``program.py`` in a fresh private directory (the sandbox's working directory)
and run as ``__main__`` by the driver's ``program`` mode, with the same isolation and limits as a session
and with the socket constructors disabled as well. It passes when it exits with status 0 within
``timeout_s``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sst_interp.sandbox.check import check_backend
from sst_interp.sandbox.config import SandboxConfig
from sst_interp.sandbox.output import CaptureFiles
from sst_interp.sandbox.process import SandboxProcess, make_workdir, remove_workdir

PROGRAM_NAME = "program.py"
REASON_CHARS = 200


@dataclass(frozen=True)
class ExecutionResult:
    """Outcome of running one program.

    Args:
        passed: the program exited with status 0 within the time limit.
        status: ``"passed"``, ``"timeout after N s"`` or ``"failed: <last line of stderr>"`` (or
            ``"failed: killed by SIGKILL ..."`` / ``"failed: exited with status N"`` when it printed nothing).
    """

    passed: bool
    status: str


def run_program(program: str, config: SandboxConfig | None = None) -> ExecutionResult:
    """Run Python source ``program`` in a sandbox described by ``config`` (default :class:`SandboxConfig`)."""
    config = config if config is not None else SandboxConfig()
    check_backend(config)
    workdir = make_workdir()
    capture = CaptureFiles()
    try:
        path = os.path.join(workdir, PROGRAM_NAME)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(program)
        process = SandboxProcess.launch(config, workdir, capture, ["program", path], channel=False)
        try:
            finished = process.wait_exit(config.timeout_s)
        finally:
            process.close()  # kills what is left (a timed-out program, or children it left behind)
        if not finished:
            return ExecutionResult(False, f"timeout after {config.timeout_s:g} s")
        if process.popen.returncode == 0:
            return ExecutionResult(True, "passed")
        _, stderr = capture.read(1_000_000)
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else process.exit_reason()
        return ExecutionResult(False, f"failed: {reason[:REASON_CHARS]}")
    finally:
        capture.close()
        remove_workdir(workdir)
