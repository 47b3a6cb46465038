"""Can the chosen backend run here? One-line :class:`~sst_interp.kernels.errors.UsageError` s when it cannot.

For ``bwrap`` two things are checked: the executable is on ``PATH``, and a trivial sandbox with the real
options starts (some containers forbid the namespaces it needs). The trial runs once per process (per bwrap
path and effective uid) and its verdict is cached.
"""

from __future__ import annotations

import os
import threading

from sst_interp.kernels.errors import UsageError
from sst_interp.sandbox.bwrap import bwrap_version, find_bwrap
from sst_interp.sandbox.config import SandboxConfig
from sst_interp.sandbox.output import CaptureFiles
from sst_interp.sandbox.process import SETUP_FAILURE_STATUS, SandboxProcess, make_workdir, remove_workdir
from sst_interp.sandbox.seccomp import SeccompUnavailable, filter_program

UNSAFE_ALTERNATIVE = "or pass --sandbox subprocess to run model code without isolation (unsafe)"
MISSING_BWRAP = f"bubblewrap (bwrap) is not installed: apt-get install bubblewrap, {UNSAFE_ALTERNATIVE}"
PROBE_TIMEOUT_S = 30.0

_probe_lock = threading.Lock()
_probe_verdicts: dict[tuple[str, int], str | None] = {}


def probe_bwrap() -> str | None:
    """Start one trivial sandbox; None if it worked, else the reason (one line)."""
    config = SandboxConfig()
    workdir = make_workdir()
    capture = CaptureFiles()
    try:
        process = SandboxProcess.launch(config, workdir, capture, ["probe"], channel=False)
        try:
            finished = process.wait_exit(PROBE_TIMEOUT_S)
        finally:
            process.close()
        _, stderr = capture.read(400)
    finally:
        capture.close()
        remove_workdir(workdir)
    if not finished:
        return f"a trial sandbox did not finish within {PROBE_TIMEOUT_S:g} s"
    if process.popen.returncode == 0:
        return None
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    detail = lines[-1] if lines else process.exit_reason()
    if process.popen.returncode == SETUP_FAILURE_STATUS:
        return f"the sandbox setup failed ({detail})"
    return detail


def check_backend(config: SandboxConfig) -> None:
    """Raise :class:`~sst_interp.kernels.errors.UsageError` (one line) unless ``config`` can run here."""
    config.validate()
    if config.backend != "bwrap":
        return
    bwrap = find_bwrap()
    if bwrap is None:
        raise UsageError(MISSING_BWRAP)
    # read here, in the caller's thread, so that a version that does not decode is one error: line before any
    # sandbox is started (each launch reads it again, from the cache)
    bwrap_version(bwrap)
    try:
        filter_program()
    except SeccompUnavailable as err:
        raise UsageError(f"the sandbox's seccomp filter cannot be built: {err}, {UNSAFE_ALTERNATIVE}") from err
    key = (bwrap, os.geteuid())
    with _probe_lock:
        if key not in _probe_verdicts:
            _probe_verdicts[key] = probe_bwrap()
        problem = _probe_verdicts[key]
    if problem is not None:
        problem = " ".join(problem.split())
        raise UsageError(f"bubblewrap (bwrap) cannot create its sandbox here: {problem}; unprivileged user "
                         f"namespaces may be disabled (sysctl user.max_user_namespaces, "
                         f"kernel.unprivileged_userns_clone, kernel.apparmor_restrict_unprivileged_userns), "
                         f"{UNSAFE_ALTERNATIVE}")
