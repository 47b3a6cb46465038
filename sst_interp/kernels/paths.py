"""Output folders the CLIs write into: refused in one line, before any work, when they cannot be written."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from sst_interp.kernels.errors import UsageError


def ensure_writable_folder(path: str | Path, flag: str = "--out") -> Path:
    """Check that ``path`` is, or can become, a writable folder; returns it as a Path. Writes nothing that stays:
    a probe file in the nearest existing folder is created and removed at once.

    Raises:
        UsageError: ``path`` (or a parent on the way) is a file, or the nearest existing folder cannot be written
            (permissions, a read-only filesystem, a missing mount).
    """
    path = Path(path)
    target = path
    while not target.exists() and target != target.parent:
        target = target.parent
    if not target.is_dir():
        where = "is a file" if target == path else f"lies under {target}, which is a file"
        raise UsageError(f"{flag} {path} {where}, not a folder; pick another {flag}")
    try:
        handle, probe = tempfile.mkstemp(prefix=".sst_write_probe_", dir=target)
    except OSError as err:
        raise UsageError(f"{flag} {path}: cannot write into {target} ({err.strerror}); pick a writable {flag}") \
            from None
    os.close(handle)
    os.unlink(probe)
    return path
