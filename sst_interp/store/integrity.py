"""Integrity of run files: Parquet page checksums on every read, sha256 of whole files for ``verify`` and resume.

Every Parquet file the writer writes carries a CRC32 per page (``write_page_checksum=True``); every read here asks
pyarrow to verify them (``page_checksum_verification=True``), so a flipped byte inside a data page fails the read
of that page instead of returning changed values. Page verification costs nothing extra on open and little on
read (one CRC per page, computed as the page is decoded). A file's sha256, recorded by the writer in the manifest,
covers every byte (headers and footer included) but needs a full read, so only ``verify`` and resume check it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import IO, Any, NamedTuple

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sst_interp.store.errors import CorruptRunError

#: What to tell the user about a damaged file: repair keeps what verifies, resume re-records the rest.
REPAIR_ADVICE = "python -m sst_interp.store repair RUN rebuilds what verifies and drops the rest, then rerun the " \
                "same record command to re-record the damaged questions (python -m sst_interp.store verify RUN " \
                "lists every damaged file)"
#: What decoding a damaged file raises besides I/O errors: pyarrow decodes footer names and metadata as UTF-8 (a
#: UnicodeDecodeError, a ValueError) and its own structures (ArrowException); pandas metadata is JSON (ValueError).
DECODE_ERRORS = (ValueError, pa.ArrowException)
_CHUNK = 1 << 22


class Written(NamedTuple):
    """A file the writer finished: its size in bytes and the sha256 (hex) of its bytes."""

    bytes: int
    sha256: str


class HashingSink:
    """A write-only file wrapper that hashes every byte written through it, so a file's sha256 is known when it
    is closed without reading it back. Only the methods pyarrow's output stream uses are provided."""

    def __init__(self, handle: IO[bytes]) -> None:
        self._handle = handle
        self._hash = hashlib.sha256()
        self.closed = False

    def write(self, data: Any) -> int:
        """Hash and write ``data``; returns the count written."""
        view = memoryview(data)
        self._hash.update(view)
        return self._handle.write(view)

    def tell(self) -> int:
        """Position in the underlying file."""
        return self._handle.tell()

    def flush(self) -> None:
        """Flush the underlying file."""
        self._handle.flush()

    def close(self) -> None:
        """Mark closed; the underlying file is closed (fsync'ed and renamed) by its owner, atomic_open."""
        self.closed = True

    def writable(self) -> bool:
        """Always True (a write-only sink)."""
        return True

    def seekable(self) -> bool:
        """Always False: Parquet is written sequentially, and hashing depends on it."""
        return False

    def hexdigest(self) -> str:
        """sha256 (hex) of every byte written so far."""
        return self._hash.hexdigest()


def sha256_file(target: Path) -> str:
    """sha256 (hex) of a file's bytes, read in 4 MiB chunks (hashlib releases the GIL on large updates)."""
    digest = hashlib.sha256()
    with open(target, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def repair_advice(target: Path) -> str:
    """:data:`REPAIR_ADVICE` naming the run that holds ``target`` (a table, or a shard under KIND/depth=D/)."""
    run = target.parents[2] if target.parent.name.startswith("depth=") else target.parent
    return REPAIR_ADVICE.replace("RUN", str(run))


def damaged(target: Path, err: BaseException) -> CorruptRunError:
    """The one-line error for a file whose pages or footer fail to read."""
    if isinstance(err, UnicodeDecodeError):  # its message quotes the undecodable bytes
        reason = f"{err.reason} at byte {err.start}: not UTF-8"
    else:
        reason = " ".join(str(err).split())
    return CorruptRunError(f"{target} is damaged ({reason}); {repair_advice(target)}")


def open_parquet(target: Path, metadata: pq.FileMetaData | None = None) -> pq.ParquetFile:
    """Open a Parquet file whose pages are CRC-checked as they are read (``metadata``: a footer read before)."""
    try:
        return pq.ParquetFile(target, metadata=metadata, page_checksum_verification=True)
    except (OSError, *DECODE_ERRORS) as err:
        raise damaged(target, err) from err


def read_row_group(handle: pq.ParquetFile, target: Path, group: int, columns: list[str] | None = None) -> pa.Table:
    """One row group with its pages CRC-checked; damage is a CorruptRunError naming ``target``."""
    try:
        return handle.read_row_group(group, columns=columns)
    except (OSError, *DECODE_ERRORS) as err:
        raise damaged(target, err) from err


def read_file(target: Path, metadata: pq.FileMetaData | None = None) -> pa.Table:
    """Every row group of a shard with its pages CRC-checked, through one ``ParquetFile`` (about 3x faster than
    :func:`read_table`'s dataset path on shards of many small row groups); damage is a CorruptRunError."""
    handle = open_parquet(target, metadata)
    try:
        return handle.read()
    except (OSError, *DECODE_ERRORS) as err:
        raise damaged(target, err) from err


def read_table(target: Path, columns: list[str] | None = None) -> pa.Table:
    """A whole (small) Parquet table with its pages CRC-checked; damage is a CorruptRunError naming ``target``."""
    try:
        return pq.read_table(target, columns=columns, page_checksum_verification=True)
    except (OSError, *DECODE_ERRORS) as err:
        raise damaged(target, err) from err


def to_frame(table: pa.Table, target: Path) -> pd.DataFrame:
    """``table`` (read from ``target``) as a DataFrame; footer metadata that does not decode (pandas' JSON) is a
    CorruptRunError naming ``target``, as a damaged page is."""
    try:
        return table.to_pandas()
    except DECODE_ERRORS as err:
        raise damaged(target, err) from err


def scan_pages(target: Path) -> None:
    """Read every page of ``target`` (one row group at a time, so memory stays bounded) with CRC checks."""
    handle = open_parquet(target)
    for group in range(handle.metadata.num_row_groups):
        read_row_group(handle, target, group)
