"""``python -m sst_interp.store``: maintenance commands for run directories.

    python -m sst_interp.store verify runs/gsm8k     # bytes (page checksums, sha256) and consistency of every file
    python -m sst_interp.store repair runs/gsm8k     # rebuild manifest.json from the shards and tables, and
                                                     # each damaged table from its rows that verify

Exit codes: 0 all files intact and consistent (verify) or the manifest rebuilt (repair); 1 verification found
damaged or inconsistent files (listed on stdout, one a line, each naming the file at fault); 2 bad input (not a
run directory).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sst_interp.cli.args import config_parser
from sst_interp.kernels.errors import cli_entry
from sst_interp.store import manifest as mf

if TYPE_CHECKING:
    from sst_interp.store.verify import VerifyReport

EXIT_DAMAGED = 1


def _parser() -> argparse.ArgumentParser:
    # the project's one CLI mechanism: a bad or missing argument is one error: line with a --help pointer
    parser = config_parser("python -m sst_interp.store", __doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    verify = commands.add_parser("verify", help="check every file's page checksums and sha256, the contract, and "
                                                "that the manifest agrees with the shards and tables")
    verify.add_argument("run", help="a run directory (the --out of a record run)")
    repair = commands.add_parser("repair", help="rebuild manifest.json from the shards' footers and the tables")
    repair.add_argument("run", help="a run directory (the --out of a record run)")
    return parser


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (UsageError: one ``error:`` line and exit 2, via cli_entry)."""
    args = _parser().parse_args(argv)
    if args.command == "repair":
        return _repair(args.run)
    # Imported here, not at the top: verify and rebuild load pyarrow and numpy (about 0.5 s of CPU), which --help
    # does not need.
    from sst_interp.store.verify import verify_run

    report = verify_run(args.run)
    if not report.ok:
        return _refuse(args.run, report)
    mb = report.bytes / 1e6
    notes = []
    if report.unhashed:
        notes.append(f"{len(report.unhashed)} without a recorded sha256 (pages and footers checked only)")
    if report.strays:
        notes.append(f"{len(report.strays)} not in the writer's index (left by an interrupted batch; resume "
                     "removes them)")
    detail = f"; {'; '.join(notes)}" if notes else ""
    print(f"ok: {len(report.checked)} files ({mb:.1f} MB) of {args.run} verified, consistent{detail}")
    return 0


def _refuse(run: str, report: VerifyReport) -> int:
    """List every damaged and inconsistent file on stdout, and say on one stderr line what to do."""
    for rel, reason in report.damaged:
        print(f"damaged: {rel}: {reason}")
    for finding in report.inconsistent:
        print(f"inconsistent: {finding.file}: {finding.reason}")
    parts = []
    # the manifest is named on its own: the count is of the shards and tables read, which it is not one of
    for rel, reason in report.damaged:
        if rel == mf.MANIFEST_NAME:
            parts.append(f"{mf.MANIFEST_NAME} of {run} is {reason}")
    files = [rel for rel, _ in report.damaged if rel != mf.MANIFEST_NAME]
    if files:
        parts.append(f"{len(files)} of {len(report.checked)} files of {run} are damaged")
    if report.inconsistent:
        parts.append(f"{len(report.inconsistent)} inconsistencies in {run}")
    faulty = {rel for rel, _ in report.damaged} | {f.file for f in report.inconsistent}
    if mf.MANIFEST_NAME in faulty:
        advice = f"{mf.REPAIR_COMMAND} {run} rebuilds manifest.json from the shards and tables"
    else:
        advice = "rerun the same record command to re-record their questions"
    print(f"error: {' and '.join(parts)}; {advice}", file=sys.stderr)
    return EXIT_DAMAGED


def _repair(run: str) -> int:
    from sst_interp.store.rebuild import rebuild_manifest  # see main: not loaded for --help

    report = rebuild_manifest(run)
    removed = f"; removed {len(report.removed)} shard file(s) it could not keep ({', '.join(report.removed[:3])}" \
              f"{' ...' if len(report.removed) > 3 else ''}): rerun the same record command to record their " \
              "questions again" if report.removed else ""
    backup = f"; the previous manifest is in {Path(run) / report.backup}" if report.backup else ""
    rebuilt = f"; rebuilt {', '.join(report.rebuilt)} from the rows that pass their checks" if report.rebuilt else ""
    print(f"repaired: {Path(run) / mf.MANIFEST_NAME} rebuilt from the files: {report.question_depths} question-depths "
          f"in {report.batches} batches{rebuilt}{removed}{backup}")
    return 0


def console() -> int:
    """The ``sst-store`` console script."""
    return main()
