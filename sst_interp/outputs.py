"""Output files of report, probe and train.codeact_data: each written whole or not at all.

A file's bytes are made in memory first (these outputs are small: figures, tables, JSON, training text), so the
space a file needs is known before it is written; then :func:`write_output` writes them to a temporary sibling and
renames it (:func:`sst_interp.store.atomic.atomic_open`: fsync, ``os.replace``, the temporary file removed on any
error). A full disk is then an :class:`OutputSpaceError`: one line naming the file, the space it needed and the
space free, and no partial file under the final name.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from sst_interp.kernels.errors import UsageError
from sst_interp.store.atomic import atomic_open


class OutputSpaceError(UsageError):
    """The disk filled while writing an output file; nothing partial was left under its name."""


def _free_bytes(folder: Path) -> int:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return 0  # the folder vanished or cannot be statted: report none free rather than fail again


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"


def space_error(err: OSError, target: Path, needed: int) -> OutputSpaceError | None:
    """The one-line error for ``err`` when it is a full disk (ENOSPC, or EDQUOT: a quota), else None."""
    if err.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    return OutputSpaceError(f"disk full writing {target}: it needs {_size(needed)}, {_size(_free_bytes(target.parent))}"
                            " free; free some space (or pick another --out) and run the same command again")


def write_output(target: str | Path, data: bytes | str) -> Path:
    """Write ``data`` (str: UTF-8) to ``target`` atomically; OutputSpaceError on a full disk. Returns ``target``."""
    target = Path(target)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        with atomic_open(target) as handle:
            handle.write(payload)
    except OSError as err:
        full = space_error(err, target, len(payload))
        if full is not None:
            raise full from None
        raise
    return target
