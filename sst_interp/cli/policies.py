"""``python -m sst_interp.probe policies --run RUN [--rules kl,entropy,state] [--live RUN[=SECONDS] ...]``: sweep
per-position depth policies over thresholds on a fixed-depth run, beside runs recorded under policies, and write
the accuracy-against-compute table and figure.

Bad input (an unknown rule, a rule the run cannot replay, a bad ``--policy`` string, a quantile outside (0, 1), a
run that is not a fixed-depth run with per-iteration logits) is one ``error:`` line and exit 2, before anything is
written.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sst_interp.cli.args import add_config_flags, config_from_namespace, config_parser
from sst_interp.kernels.errors import cli_entry
from sst_interp.kernels.fields import arg
from sst_interp.kernels.paths import ensure_writable_folder
from sst_interp.outputs import write_output
from sst_interp.probe.sweep_config import QUANTILES, SweepConfig  # noqa: F401 (QUANTILES: the default, tested)

PROG = "python -m sst_interp.probe policies"
SHOWN = ["run", "condition", "source", "n_questions", "accuracy_pct", "accuracy_low_pct", "accuracy_high_pct",
         "exact_questions", "mean_iterations", "wall_s", "pareto"]


@dataclass(frozen=True)
class PoliciesOutput:
    """Where ``policies`` writes its table and figure: the command's one flag that is not the sweep's
    (:class:`~sst_interp.probe.sweep_config.SweepConfig` declares the others)."""

    out: Path | None = arg(None, help="output folder (default: <run>/policies)")


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """Run the sweep, print the table, write ``tab_depth_pareto.csv`` and ``fig_depth_pareto_front.png``."""
    parser = config_parser(PROG, __doc__.split("\n\n")[0])
    add_config_flags(parser, SweepConfig)
    add_config_flags(parser, PoliciesOutput)
    args = parser.parse_args(argv)
    config = config_from_namespace(SweepConfig, args)
    output = config_from_namespace(PoliciesOutput, args)

    import pandas as pd

    from sst_interp.probe.policy_sweep import sweep
    from sst_interp.reporting.artefacts import ArtefactData
    from sst_interp.reporting.fig_common import PNG_DPI
    from sst_interp.reporting.fig_depth import draw_pareto

    out = ensure_writable_folder(output.out if output.out is not None else config.run / "policies")
    result = sweep(config)
    table = result.table()
    out.mkdir(parents=True, exist_ok=True)
    write_output(out / "tab_depth_pareto.csv", table.to_csv(index=False).encode())
    figure = draw_pareto(ArtefactData({"points": table}, {"notes": list(result.notes)}))
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=PNG_DPI)
    write_output(out / "fig_depth_pareto_front.png", buffer.getvalue())
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.float_format", "{:.3g}".format):
        print(table[SHOWN].to_string(index=False))
    for note in result.notes:
        print(f"note: {note}")
    print(f"wrote {out}")
    return 0
