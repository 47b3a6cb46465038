"""Errors of the run store."""

from __future__ import annotations

from sst_interp.kernels.errors import UsageError


class CorruptRunError(UsageError):
    """A shard or manifest of a run is damaged; the message names the file and how to recover."""
