"""``python -m sst_interp.report`` (also ``sst-report``): regenerate every table and figure the recorded runs support.

Writes each table as Markdown, CSV and LaTeX (booktabs) and each figure as PNG and PDF, named after the paper's
labels (``tab_main_results``, ``fig_overlap_heatmap``, ...), plus ``index.html`` showing them all and listing what
was skipped and why::

    python -m sst_interp.report                                   # the most recent run under runs/
    python -m sst_interp.report --run runs/gpqa --baseline runs/gpqa_base --out reports/
    python -m sst_interp.report --run runs/ --only 'fig_layer_profile*,tab_overthinking'
    python -m sst_interp.report --run runs/main --run runs/nobias --run runs/ema --baseline runs/base \
        --training-log train/sst --training-log train/nobias --training-log train/base --external gpqa

Exit codes: 0 done; 1 some artefact failed (the page lists the error); 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sst_interp.cli.args import add_config_flags, arg, config_from_namespace, config_parser
from sst_interp.kernels.errors import cli_entry
from sst_interp.checkpoints import resolve_checkpoint
from sst_interp.kernels.paths import ensure_writable_folder


@dataclass(frozen=True)
class ReportFlags:
    """The flags of ``python -m sst_interp.report``; :func:`main` turns them into a ``ReportConfig``."""

    run: list[Path] = arg(default_factory=list, repeat=True,
                          help="run directory or a folder of runs (repeatable; default: the most recent under "
                               "--runs-root)")
    baseline: list[Path] = arg(default_factory=list, repeat=True,
                               help="matched-baseline run directory (repeatable; paired by shared questions)")
    probe: Path | None = arg(None, help="saved halting probe (default: train one on each run with MUST HALT labels)")
    checkpoint: Path | None = arg(None, help="SST checkpoint folder or name (demo-codeact) for the alpha figures "
                                             "(default: the one the run's manifest names)")
    training_log: list[Path] = arg(default_factory=list, repeat=True,
                                   help="training output folder, train_log.csv or named checkpoint (demo-codeact, "
                                        "demo-codeact-baseline) (repeatable: the SST's and the baseline's)")
    out: Path = arg(Path("reports"), help="output folder")
    only: list[str] = arg(default_factory=list, metavar="NAME,...",
                          help="comma-separated artefact names or globs to produce (default: all)")
    runs_root: Path = arg(Path("runs"), help="where to look for the most recent run when no --run is given")
    experiment: list[Path] = arg(default_factory=list, repeat=True,
                                 help="intervention experiment folder (python -m sst_interp.intervene ... --out), "
                                      "repeatable: its tables and heatmaps join the report")
    external: str | None = arg(None, metavar="FILE.csv",
                               help="published accuracies (columns model, parameters, accuracy, prompting, source) "
                                    "to place the run's staged accuracy among, or a shipped name: gsm8k, gpqa (the "
                                    "figures the paper cites); without it the external comparisons are skipped")
    quiet: bool = arg(False, help="no progress lines")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (one flag per :class:`ReportFlags` field)."""
    parser = config_parser("python -m sst_interp.report", __doc__.split("\n\n")[0])
    add_config_flags(parser, ReportFlags)
    return parser


def _named(path: Path | None) -> Path | None:
    """A named checkpoint (demo-codeact, ...) as its installed folder; other paths unchanged."""
    return None if path is None else Path(resolve_checkpoint(path))


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m sst_interp.report`` and ``sst-report``."""
    args = config_from_namespace(ReportFlags, build_parser().parse_args(argv))
    # Imported after parsing, so that ``--help`` and bad flags answer without loading the analysis stack.
    from sst_interp.reporting import ReportConfig, build_report

    ensure_writable_folder(args.out)
    config = ReportConfig(
        runs=tuple(args.run), baselines=tuple(args.baseline), probe=args.probe,
        checkpoint=_named(args.checkpoint), training_logs=tuple(_named(p) for p in args.training_log), out=args.out,
        only=tuple(args.only), runs_root=args.runs_root,
        progress=not args.quiet, experiments=tuple(args.experiment), external=args.external,
    )
    result = build_report(config)
    ok, skipped, failed = (result.names(s) for s in ("ok", "skipped", "failed"))
    print(f"wrote {len(ok)} artefacts to {result.out} ({len(skipped) + len(result.unsupported)} skipped, "
          f"{len(failed)} failed); open {result.index}")
    if failed:
        print(f"failed: {', '.join(failed)} (see {result.index})", file=sys.stderr)
        return 1
    return 0


def console() -> int:
    """The ``sst-report`` console script."""
    return main()
