"""``python -m sst_interp.probe.position_sim``: simulate per-position depth policies on a fixed-depth run.

    python -m sst_interp.probe.position_sim --run RUN --policy kl:0.01,max=4 [--policy ...] [--out CSV]

Prints the summary of each policy (one row per policy); ``--out`` also writes the per-(question, turn) table.
The simulation itself is :mod:`sst_interp.probe.policy_simulation`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sst_interp.cli.args import add_config_flags, arg, config_from_namespace, config_parser
from sst_interp.kernels.errors import cli_entry


@dataclass(frozen=True)
class PositionSimFlags:
    """The flags of ``python -m sst_interp.probe.position_sim`` (one flag per field)."""

    run: Path = arg(help="run directory recorded at fixed depth max")
    policy: list[str] = arg(repeat=True, metavar="POLICY",
                            help="policy string, e.g. kl:0.01,max=4 (repeatable; max defaults to the run's deepest)")
    out: Path | None = arg(None, help="write the per-(question, turn) table to this CSV")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; every flag maps to a :class:`PositionSimFlags` field."""
    parser = config_parser("python -m sst_interp.probe.position_sim",
                           "Simulate per-position depth policies on a fixed-depth run.")
    add_config_flags(parser, PositionSimFlags)
    return parser


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """Simulate each ``--policy`` on ``--run`` and print the summaries; returns the exit code."""
    flags = config_from_namespace(PositionSimFlags, build_parser().parse_args(argv))
    # imported after parsing: --help and bad flags answer without torch
    import pandas as pd

    from sst_interp.model.halting import parse_position_policy
    from sst_interp.probe.policy_simulation import simulate_policy, simulation_table, summarize
    from sst_interp.store import Run

    recorded = Run.open(flags.run)
    default_max = max(recorded.depths) if recorded.depths else 1
    policies = [parse_position_policy(text, default_max) for text in flags.policy]
    table = pd.concat([simulation_table(simulate_policy(recorded, p), p) for p in policies], ignore_index=True)
    if flags.out is not None:
        table.to_csv(flags.out, index=False)
    for policy in policies:
        print(summarize(table[table["policy"] == policy.describe()], policy.max_depth).to_string(index=False))
    return 0
