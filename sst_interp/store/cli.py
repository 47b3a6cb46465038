"""``python -m sst_interp.store``: maintenance commands for run directories.

    python -m sst_interp.store verify runs/gsm8k     # page checksums + sha256 of every shard and table

Exit codes: 0 all files intact; 1 verification found damaged files (listed on stdout, one a line);
2 bad input (not a run directory).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sst_interp.errors import cli_entry
from sst_interp.store.verify import verify_run

EXIT_DAMAGED = 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sst_interp.store", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    verify = commands.add_parser("verify", help="check every shard's page checksums and sha256, and the contract")
    verify.add_argument("run", help="a run directory (the --out of a record run)")
    return parser


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (UsageError: one ``error:`` line and exit 2, via cli_entry)."""
    args = _parser().parse_args(argv)
    report = verify_run(args.run)
    mb = report.bytes / 1e6
    if not report.ok:
        for rel, reason in report.damaged:
            print(f"damaged: {rel}: {reason}")
        print(f"error: {len(report.damaged)} of {len(report.checked)} files of {args.run} are damaged; rerun the "
              "same record command to re-record their questions", file=sys.stderr)
        return EXIT_DAMAGED
    notes = []
    if report.unhashed:
        notes.append(f"{len(report.unhashed)} without a recorded sha256 (pages and footers checked only)")
    if report.strays:
        notes.append(f"{len(report.strays)} not in the writer's index (left by an interrupted batch; resume "
                     "removes them)")
    detail = f"; {'; '.join(notes)}" if notes else ""
    print(f"ok: {len(report.checked)} files ({mb:.1f} MB) of {args.run} verified{detail}")
    return 0
