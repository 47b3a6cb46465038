"""Where sandboxes keep their host-side folders, and removing what a killed process left behind.

Every folder a sandbox needs on the host (its work directory, the files its output is captured in) is made inside
one parent per process, ``$TMPDIR/sst_interp_sandbox_<pid>``. A process that dies without cleaning up (``kill -9``
of a ``record``) leaves that parent behind; the next process that starts a sandbox removes every such parent whose
process is gone. A parent whose pid is alive is never touched, so two recordings side by side keep their own.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path

PREFIX = "sst_interp_sandbox_"
_PARENT = re.compile(rf"^{PREFIX}(\d+)$")
_own: Path | None = None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def sweep_stale(root: str | Path | None = None) -> list[Path]:
    """Remove the sandbox parents in ``root`` (default: the temp directory) whose process no longer runs; returns
    what was removed. Never raises: what cannot be removed is a warning."""
    removed = []
    base = Path(root or tempfile.gettempdir())
    for entry in base.iterdir() if base.is_dir() else ():
        match = _PARENT.match(entry.name)
        if not match or not entry.is_dir() or entry.is_symlink() or _alive(int(match.group(1))):
            continue
        failures: list[str] = []

        def record(_function: object, path: str, exc_info: object) -> None:
            failures.append(f"{path}: {exc_info[1] if isinstance(exc_info, tuple) else exc_info}")

        shutil.rmtree(entry, onerror=record)  # as remove_workdir does (onexc needs Python 3.12)
        if failures:
            warnings.warn(f"could not remove {entry} left by a stopped process: {failures[0]}", RuntimeWarning,
                          stacklevel=2)
        else:
            removed.append(entry)
    return removed


def process_parent() -> Path:
    """This process's parent folder for sandbox folders, made (after sweeping stale ones) on first use.

    Mode 0711: a sandbox running as another uid can reach its own folder inside, but cannot list its neighbours.
    """
    global _own
    if _own is None or not _own.is_dir():
        sweep_stale()
        path = Path(tempfile.gettempdir()) / f"{PREFIX}{os.getpid()}"
        path.mkdir(mode=0o711, exist_ok=True)
        os.chmod(path, 0o711)  # mkdir's mode is masked by the umask
        atexit.register(_remove_if_empty, path)
        _own = path
    return _own


def _remove_if_empty(path: Path) -> None:
    # At a normal exit every sandbox has removed its folders; a parent still holding something is left for the
    # next sweep rather than deleted under a sandbox that might still be closing.
    if path.is_dir() and not any(path.iterdir()):
        path.rmdir()
