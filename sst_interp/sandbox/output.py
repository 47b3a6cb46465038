"""Captured output: the files that hold a sandbox's stdout and stderr, read back with a length cap.

The files live in a directory of the parent's that the sandbox cannot see; the sandbox gets only open
file descriptors (its fds 1 and 2). So the code cannot swap a capture file for a symlink to a host file the
parent would then read back, and a file is read when the driver says the block is done, not when every
holder of a pipe has closed it (a background child keeping stdout open cannot hold the caller up).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from sst_interp.sandbox.tempdirs import process_parent


def cap_text(text: str, cap: int) -> str:
    """``text`` cut to ``cap`` characters, with ``\\n... [truncated N chars]`` saying how much was cut."""
    if len(text) <= cap:
        return text
    return f"{text[:cap]}\n... [truncated {len(text) - cap} chars]"


class CaptureFiles:
    """A private directory with ``stdout`` and ``stderr`` files, opened append-only for the sandbox."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="sst_interp_io_", dir=process_parent()))
        self.stdout_path = self.directory / "stdout"
        self.stderr_path = self.directory / "stderr"
        # O_APPEND: writes land at the current end even after the parent truncated the file between blocks
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        self.stdout_fd = os.open(self.stdout_path, flags, 0o600)
        self.stderr_fd = os.open(self.stderr_path, flags, 0o600)

    def reset(self) -> None:
        """Empty both files (before a block, so each block reads back only its own output)."""
        os.truncate(self.stdout_path, 0)
        os.truncate(self.stderr_path, 0)

    def read(self, cap: int) -> tuple[str, str]:
        """``(stdout, stderr)`` decoded as UTF-8 (bad bytes replaced), each cut to ``cap`` characters.

        The files are at most ``max_file_mb`` (``RLIMIT_FSIZE`` in the sandbox), so reading them whole is
        bounded; the whole text is decoded so the truncation note can count characters.
        """
        stdout = self.stdout_path.read_bytes().decode("utf-8", errors="replace")
        stderr = self.stderr_path.read_bytes().decode("utf-8", errors="replace")
        return cap_text(stdout, cap), cap_text(stderr, cap)

    def close(self) -> None:
        """Close the descriptors and remove the directory."""
        if self.stdout_fd < 0:
            return  # already closed
        for fd in (self.stdout_fd, self.stderr_fd):
            os.close(fd)
        self.stdout_fd = self.stderr_fd = -1
        shutil.rmtree(self.directory)
