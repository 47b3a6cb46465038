"""``python -m sst_interp.probe.position_sim``: simulate per-position depth policies on a fixed-depth run.

    python -m sst_interp.probe.position_sim --run RUN --policy kl:0.01,max=4 [--policy ...] [--out CSV]

Prints the summary of each policy (one row per policy); ``--out`` also writes the per-(question, turn) table.
The simulation itself is :mod:`sst_interp.probe.policy_simulation`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from sst_interp.cli.args import add_config_flags, config_from_namespace, config_parser
from sst_interp.kernels.errors import cli_entry
from sst_interp.probe.simulation_config import PositionSimConfig


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; every flag maps to a :class:`~sst_interp.probe.simulation_config.PositionSimConfig`
    field."""
    parser = config_parser("python -m sst_interp.probe.position_sim",
                           "Simulate per-position depth policies on a fixed-depth run.")
    add_config_flags(parser, PositionSimConfig)
    return parser


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """Simulate each ``--policy`` on ``--run`` and print the summaries; returns the exit code."""
    config = config_from_namespace(PositionSimConfig, build_parser().parse_args(argv))
    # imported after parsing: --help and bad flags answer without torch
    from sst_interp.probe.policy_simulation import simulate_policies, summarize

    table, policies = simulate_policies(config)
    for policy in policies:
        print(summarize(table[table["policy"] == policy.describe()], policy.max_depth).to_string(index=False))
    return 0
