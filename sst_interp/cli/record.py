"""``python -m sst_interp.record`` (also ``sst-record``): the command line over :func:`sst_interp.record.record`.

The flags are those :class:`~sst_interp.record.options.RecordOptions` declares (built by :mod:`sst_interp.cli.args`;
``--source-option``, ``--action-tokens`` and the ``--sandbox*`` flags are the forms of :mod:`sst_interp.record.forms`),
and parsing yields the library's :class:`~sst_interp.record.options.RecordOptions` itself.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sst_interp.cli.args import add_config_flags, config_from_namespace, config_parser
from sst_interp.kernels.errors import cli_entry
from sst_interp.record.options import RecordOptions

DESCRIPTION = ("Generate answers (or CodeACT episodes) at every iteration depth, record the state stream inline, "
               "grade. Rerunning the same command resumes an interrupted run.")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; every flag maps to a :class:`~sst_interp.record.options.RecordOptions` field."""
    parser = config_parser("python -m sst_interp.record", DESCRIPTION)
    add_config_flags(parser, RecordOptions)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> RecordOptions:
    """Parse the command line into :class:`~sst_interp.record.options.RecordOptions` (bad input, a bad
    ``--source-option``, ``--action-tokens`` or ``--sandbox-*`` value included, is a
    :class:`~sst_interp.kernels.errors.UsageError`)."""
    return config_from_namespace(RecordOptions, build_parser().parse_args(argv))


def run(argv: Sequence[str] | None = None) -> dict[int, float]:
    """Parse ``argv`` and record; returns the accuracy per depth (for callers in Python; errors raise)."""
    options = parse_args(argv)  # first: --help and bad flags answer before the workflow (torch) loads
    from sst_interp.record.runner import record

    return record(options)


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sst_interp.record``; returns the exit code (0 once the run is recorded)."""
    try:
        run(argv)
    except KeyboardInterrupt:
        print("interrupted: completed batches are saved; rerun the same command to resume", file=sys.stderr)
        return 130
    return 0


def console() -> int:
    """The ``sst-record`` console script."""
    return main()
