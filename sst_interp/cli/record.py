"""``python -m sst_interp.record``: the command line over :func:`sst_interp.record.runner.record`.

One flag per :class:`~sst_interp.record.options.RecordArgs` field, built by :mod:`sst_interp.cli.args`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sst_interp.cli.args import add_config_flags, config_from_namespace, config_parser
from sst_interp.errors import cli_entry
from sst_interp.record.options import RecordArgs

DESCRIPTION = ("Generate answers (or CodeACT episodes) at every iteration depth, record the state stream inline, "
               "grade. Rerunning the same command resumes an interrupted run.")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; every flag maps to a :class:`RecordArgs` field."""
    parser = config_parser("python -m sst_interp.record", DESCRIPTION)
    add_config_flags(parser, RecordArgs)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> RecordArgs:
    """Parse the command line into :class:`RecordArgs` (bad input is a :class:`~sst_interp.errors.UsageError`)."""
    return config_from_namespace(RecordArgs, build_parser().parse_args(argv))


@cli_entry
def main(argv: Sequence[str] | None = None) -> dict[int, float]:
    """``python -m sst_interp.record``; returns the accuracy per depth."""
    from sst_interp.record.runner import record

    args = parse_args(argv)
    try:
        return record(args)
    except KeyboardInterrupt:
        print("interrupted: completed batches are saved; rerun the same command to resume", file=sys.stderr)
        raise SystemExit(130) from None


def console() -> int:
    """The ``sst-record`` console script: :func:`main`, exiting 0 on success (``main`` returns the accuracies, which
    a console script would turn into exit status 1)."""
    main()
    return 0
