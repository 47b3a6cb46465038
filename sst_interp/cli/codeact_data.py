"""``python -m sst_interp.train.codeact_data``: CodeACT training traces from GSM8K solutions.

    python -m sst_interp.train.codeact_data --gsm8k PATH/train.jsonl --out DIR

Writes ``train.jsonl``, ``validation.jsonl`` and ``stats.json`` into ``--out``; how the traces are made is
:mod:`sst_interp.train.codeact_traces`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sst_interp.cli.args import add_config_flags, arg, config_from_namespace, config_parser
from sst_interp.kernels.errors import cli_entry
from sst_interp.train.codeact_traces import TraceSetConfig, write_trace_set


@dataclass(frozen=True)
class CodeactDataFlags:
    """The flags of ``python -m sst_interp.train.codeact_data`` (one flag per field)."""

    gsm8k: Path = arg(help="GSM8K train.jsonl")
    out: Path = arg(help="folder for train.jsonl, validation.jsonl, stats.json")
    val_fraction: float = arg(0.1, help="share of kept traces for validation")
    seed: int = arg(0, help="seed of the validation split")
    limit: int | None = arg(None, help="use only the first N GSM8K rows (default: all)")
    sandbox: str = arg("bwrap", choices=("bwrap", "subprocess"),
                       help="how the traces' code runs: bwrap (isolated) | subprocess (a plain child process)")

    def config(self) -> TraceSetConfig:
        """The library config of these flags (the fields are the same)."""
        return TraceSetConfig(gsm8k=self.gsm8k, out=self.out, val_fraction=self.val_fraction, seed=self.seed,
                              limit=self.limit, sandbox=self.sandbox)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; every flag maps to a :class:`CodeactDataFlags` field."""
    parser = config_parser("python -m sst_interp.train.codeact_data", "CodeACT training traces from GSM8K solutions")
    add_config_flags(parser, CodeactDataFlags)
    return parser


def run(argv: Sequence[str] | None = None) -> dict:
    """Parse ``argv`` and write the trace set; returns its stats (for callers in Python; errors raise)."""
    config = config_from_namespace(CodeactDataFlags, build_parser().parse_args(argv)).config()
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
