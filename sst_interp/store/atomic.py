"""Atomic file writes: the one durability mechanism behind shards, small tables and the manifest.

A file is written under a temporary name in the same directory, flushed and fsync'ed, then renamed over its final
name with ``os.replace``; on any error the temporary file is removed and the final name is untouched. So a killed
process leaves either the old complete file or the new complete file, never a partial one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


def temp_name(final: Path) -> Path:
    """The temporary sibling of ``final`` written before the rename (hidden, tagged with the process id)."""
    return final.with_name(f".{final.name}.tmp-{os.getpid()}")


def is_temp_name(name: str) -> bool:
    """True for a file name made by :func:`temp_name` (a leftover of a killed writer when found on resume)."""
    return name.startswith(".") and ".tmp-" in name


@contextmanager
def atomic_open(final: Path, mode: str = "wb", encoding: str | None = None) -> Iterator[IO]:
    """Open ``final``'s temporary sibling for writing; on a clean exit fsync it and rename it to ``final``;
    on error delete it."""
    tmp = temp_name(final)
    try:
        with open(tmp, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()
