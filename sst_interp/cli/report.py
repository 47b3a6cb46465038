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

from sst_interp.cli.args import add_config_flags, config_from_namespace, config_parser
from sst_interp.kernels.errors import cli_entry
from sst_interp.kernels.paths import ensure_writable_folder
from sst_interp.reporting.config import ReportConfig


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: one flag per :class:`~sst_interp.reporting.config.ReportConfig` field."""
    parser = config_parser("python -m sst_interp.report", __doc__.split("\n\n")[0])
    add_config_flags(parser, ReportConfig)
    return parser


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m sst_interp.report`` and ``sst-report``."""
    config = config_from_namespace(ReportConfig, build_parser().parse_args(argv))
    # Imported after parsing, so that ``--help`` and bad flags answer without loading the analysis stack.
    from sst_interp.reporting import build_report

    ensure_writable_folder(config.out)
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
