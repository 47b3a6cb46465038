"""``python -m sst_interp.train.codeact_data``: CodeACT training traces from GSM8K solutions.

    python -m sst_interp.train.codeact_data --gsm8k PATH/train.jsonl --out DIR

Writes ``train.jsonl``, ``validation.jsonl`` and ``stats.json`` into ``--out``; how the traces are made is
:mod:`sst_interp.train.codeact_traces`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from sst_interp.cli.args import add_config_flags, config_from_namespace, config_parser
from sst_interp.kernels.errors import cli_entry
from sst_interp.train.codeact_traces import TraceSetConfig, write_trace_set


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; every flag maps to a :class:`~sst_interp.train.codeact_traces.TraceSetConfig` field."""
    parser = config_parser("python -m sst_interp.train.codeact_data", "CodeACT training traces from GSM8K solutions")
    add_config_flags(parser, TraceSetConfig)
    return parser


def run(argv: Sequence[str] | None = None) -> dict:
    """Parse ``argv`` and write the trace set; returns its stats (for callers in Python; errors raise)."""
    config = config_from_namespace(TraceSetConfig, build_parser().parse_args(argv))
    stats = write_trace_set(config)
    print(f"{stats['kept']} of {stats['rows']} GSM8K rows kept ({stats['train']} train, {stats['validation']} "
          "validation); dropped: " + (", ".join(f"{reason} {n}" for reason, n in stats["dropped"].items()) or "none"))
    print(f"wrote {config.out}/train.jsonl, validation.jsonl, stats.json")
    return stats


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sst_interp.train.codeact_data``; returns the exit code."""
    run(argv)
    return 0
