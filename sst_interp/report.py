"""``python -m sst_interp.report``: regenerate every table and figure the recorded runs support.

Writes each table as Markdown, CSV and LaTeX (booktabs) and each figure as PNG and PDF, named after the paper's
labels (``tab_main_results``, ``fig_overlap_heatmap``, ...), plus ``index.html`` showing them all and listing what
was skipped and why::

    python -m sst_interp.report                                   # the most recent run under runs/
    python -m sst_interp.report --run runs/gpqa --baseline runs/gpqa_base --out reports/
    python -m sst_interp.report --run runs/ --only 'fig_layer_profile*,tab_overthinking'

Exit codes: 0 done; 1 some artefact failed (the page lists the error); 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from sst_interp.errors import cli_entry


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (one flag per :class:`~sst_interp.reporting.ReportConfig` field)."""
    parser = argparse.ArgumentParser(prog="python -m sst_interp.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", type=Path, default=[],
                        help="run directory or a folder of runs (repeatable; default: the most recent under runs/)")
    parser.add_argument("--baseline", action="append", type=Path, default=[],
                        help="matched-baseline run directory (repeatable; paired by shared questions)")
    parser.add_argument("--probe", type=Path, default=None,
                        help="saved halting probe (default: train one on each run with MUST HALT labels)")
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="SST checkpoint for the alpha figures (default: the one the run's manifest names)")
    parser.add_argument("--training-log", action="append", type=Path, default=[],
                        help="training output folder or train_log.csv (repeatable: the SST's and the baseline's)")
    parser.add_argument("--out", type=Path, default=Path("reports"), help="output folder (default reports/)")
    parser.add_argument("--only", default="", help="comma-separated artefact names or globs to produce")
    parser.add_argument("--runs-root", type=Path, default=Path("runs"), help=argparse.SUPPRESS)
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m sst_interp.report`` and ``sst-report``."""
    from sst_interp.reporting import ReportConfig, build_report

    args = build_parser().parse_args(argv)
    config = ReportConfig(
        runs=tuple(args.run), baselines=tuple(args.baseline), probe=args.probe, checkpoint=args.checkpoint,
        training_logs=tuple(args.training_log), out=args.out,
        only=tuple(p.strip() for p in args.only.split(",") if p.strip()), runs_root=args.runs_root,
        progress=not args.quiet,
    )
    result = build_report(config)
    ok, skipped, failed = (result.names(s) for s in ("ok", "skipped", "failed"))
    print(f"wrote {len(ok)} artefacts to {result.out} ({len(skipped) + len(result.unsupported)} skipped, "
          f"{len(failed)} failed); open {result.index}")
    if failed:
        print(f"failed: {', '.join(failed)} (see {result.index})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
