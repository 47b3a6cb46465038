"""User-facing errors and the CLI convention for them.

Every error a user can fix by changing their input is a :class:`UsageError`.
CLIs catch it, print one line (``error: ...``) to stderr and exit with code 2,
so nothing already recorded is touched. The same wrapper, :func:`cli_entry`, runs every command with the
libraries' own progress bars off when stderr is not a terminal
(:func:`~sst_interp.kernels.progress.quiet_library_bars`).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TypeVar

from sst_interp.kernels.progress import quiet_library_bars

T = TypeVar("T")

EXIT_USAGE = 2


class UsageError(ValueError):
    """Bad input: the message says what is wrong and how to fix it (one line)."""


def cli_entry(main: Callable[..., T]) -> Callable[..., T]:
    """Wrap a CLI ``main`` so a :class:`UsageError` becomes one line on stderr and exit code 2; off a terminal,
    ``main`` runs with the libraries' progress bars off (a log gets the package's plain progress lines only)."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            with quiet_library_bars():
                return main(*args, **kwargs)
        except UsageError as err:
            message = " ".join(str(err).split())
            print(f"error: {message}", file=sys.stderr)
            raise SystemExit(EXIT_USAGE) from None

    return wrapper
