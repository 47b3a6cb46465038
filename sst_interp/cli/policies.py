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
from typing import TYPE_CHECKING

from sst_interp.cli.args import add_config_flags, arg, config_from_namespace, config_parser
from sst_interp.kernels.errors import cli_entry
from sst_interp.kernels.paths import ensure_writable_folder

if TYPE_CHECKING:  # the library (torch, the store) loads after the flags are parsed: --help stays fast
    from sst_interp.probe.policy_sweep import SweepConfig

PROG = "python -m sst_interp.probe policies"
#: The library's default quantiles (sst_interp.analyses.depth_policies.QUANTILES, equal by test), written out so
#: that --help does not load pandas.
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
SHOWN = ["run", "condition", "source", "n_questions", "accuracy_pct", "accuracy_low_pct", "accuracy_high_pct",
         "exact_questions", "mean_iterations", "wall_s", "pareto"]


@dataclass(frozen=True)
class PoliciesFlags:
    """The flags of ``policies`` (one per field)."""

    run: Path = arg(help="run recorded at fixed depth max (e.g. --depths 1,4) with per-iteration logits")
    rules: list[str] = arg(default_factory=list, help="rules to sweep: kl, entropy, margin, state (default: every "
                                                      "rule the run can replay; kl needs --top-k = vocabulary)")
    quantiles: list[float] = arg(default_factory=lambda: list(QUANTILES),
                                 help="quantiles of each rule's recorded values where thresholds go "
                                      f"(default: {','.join(map(str, QUANTILES))})")
    policy: list[str] = arg(default_factory=list, repeat=True,
                            help="a policy string replayed as written, e.g. state:0.05,max=4 (repeatable)")
    live: list[str] = arg(default_factory=list, repeat=True,
                          help="a run recorded under a policy, as RUN or RUN=SECONDS with its measured wall time "
                               "(repeatable)")
    run_seconds: float | None = arg(None, help="measured wall time of --run (shown when it holds one depth)")
    probe: Path | None = arg(None, help="a saved halting probe: add its per-turn choice replayed on --run (needs "
                                        "flat depths 1..k)")
    out: Path | None = arg(None, help="output folder (default: <run>/policies)")


def to_config(flags: PoliciesFlags) -> SweepConfig:
    """The flags as the library's :class:`SweepConfig` (bad ``--live`` values are a UsageError)."""
    from sst_interp.probe.policy_sweep import SweepConfig, parse_live

    return SweepConfig(run=flags.run, rules=tuple(r.strip() for r in flags.rules if r.strip()),
                       quantiles=tuple(flags.quantiles), policies=tuple(flags.policy),
                       live=tuple(parse_live(text) for text in flags.live), run_wall_s=flags.run_seconds,
                       probe=flags.probe)


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """Run the sweep, print the table, write ``tab_depth_pareto.csv`` and ``fig_depth_pareto_front.png``."""
    parser = config_parser(PROG, __doc__.split("\n\n")[0])
    add_config_flags(parser, PoliciesFlags)
    flags = config_from_namespace(PoliciesFlags, parser.parse_args(argv))

    import pandas as pd

    from sst_interp.outputs import write_output
    from sst_interp.probe.policy_sweep import sweep
    from sst_interp.reporting.artefacts import ArtefactData
    from sst_interp.reporting.fig_common import PNG_DPI
    from sst_interp.reporting.fig_depth import draw_pareto

    config = to_config(flags)
    out = ensure_writable_folder(flags.out if flags.out is not None else flags.run / "policies")
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
