"""``python -m sst_interp.record``: the command line over :func:`sst_interp.record.runner.record`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import fields

from sst_interp.errors import cli_entry
from sst_interp.record.options import DEFAULT_DEPTHS, PROTOCOLS, SANDBOXES, RecordArgs

DESCRIPTION = ("Generate answers (or CodeACT episodes) at every iteration depth, record the state stream inline, "
               "grade. Rerunning the same command resumes an interrupted run.")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser; every flag maps to a :class:`RecordArgs` field."""
    parser = argparse.ArgumentParser(prog="python -m sst_interp.record", description=DESCRIPTION)
    defaults = RecordArgs()
    add = parser.add_argument
    add("--questions", default=defaults.questions, help="question set (default demo)")
    add("--data", default=None, help="local data file/folder for the question set")
    add("--depths", default=DEFAULT_DEPTHS, help="comma-separated iteration depths (default 1,2,3,4)")
    add("--model", default=None, help="default | local HF folder | .gguf file | hub id (default: default)")
    add("--checkpoint", default=None, help="SST checkpoint folder")
    add("--demo-preset", action=argparse.BooleanOptionalAction, default=None,
        help="untrained SST with state_scale='hidden' (default: on when no --model/--checkpoint is given)")
    add("--max-new-tokens", type=int, default=None,
        help="most tokens per answer, or per model turn under codeact (default per set: demo 16, gsm8k 256, "
             "gpqa 256, math500 512, humaneval 384)")
    add("--batch-size", type=int, default=defaults.batch_size)
    add("--dtype", default=defaults.dtype, help="float32 | bfloat16 (model compute and stored hidden dtype)")
    add("--out", default=None, help="run directory (default runs/<questions>, runs/<questions>-codeact)")
    add("--full-positions", type=int, default=defaults.full_positions)
    add("--sketch-positions", type=int, default=defaults.sketch_positions)
    add("--sketch-k", type=int, default=None, help="sketch size (default round(d * 1024 / 5376))")
    add("--top-k", type=int, default=defaults.top_k)
    add("--gates", action="store_true", help="also record FFN gate activity")
    add("--limit", type=int, default=None, help="record only the first N questions")
    add("--ids", default=None, help="comma-separated question ids")
    add("--prompt-mode", default=None,
        help="two_pass | sequential | none (default: none under the demo preset, else two_pass)")
    add("--device", default=defaults.device, help="cpu | cuda | auto (default)")
    add("--source-option", action="append", default=None, metavar="KEY=VALUE",
        help="question-set option, repeatable (gpqa: subset=, password=; demo: n=, seed=, level=)")
    add("--depth-policy", default=defaults.depth_policy,
        help="fixed (default: a flat run per depth) | probe:PATH (a saved halting probe picks the depth at "
             "position 0 of each model turn, up to max(--depths))")
    add("--protocol", default=defaults.protocol, choices=PROTOCOLS,
        help="completion (default: one generation per question) | codeact (multi-turn episodes with sandboxed code)")
    add("--max-turns", type=int, default=defaults.max_turns, help="codeact: most model turns per episode (5)")
    add("--max-context-tokens", type=int, default=defaults.max_context_tokens,
        help="codeact: most tokens in an episode's context (4096)")
    add("--carry-state-across-turns", action=argparse.BooleanOptionalAction, default=defaults.carry_state_across_turns,
        help="codeact: a tool-response turn starts from the previous turn's state (default: from a zero state)")
    add("--tool-output-chars", type=int, default=defaults.tool_output_chars,
        help="codeact: most characters of tool output returned to the model (2000)")
    add("--sandbox", default=defaults.sandbox, choices=SANDBOXES,
        help="codeact/humaneval code: bwrap (bubblewrap isolation, default) | subprocess (NOT isolated)")
    add("--sandbox-timeout", type=float, default=defaults.sandbox_timeout,
        help="wall-clock seconds one code block may run (10)")
    add("--action-tokens", default=None, metavar="<execute>=ID,</execute>=ID",
        help="codeact: reserved token ids of the action tokens (default: the checkpoint's, else 262140/262141)")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> RecordArgs:
    """Parse the command line into :class:`RecordArgs` (argparse errors exit with code 2)."""
    namespace = build_parser().parse_args(argv)
    return RecordArgs(**{f.name: getattr(namespace, f.name) for f in fields(RecordArgs)})


@cli_entry
def main(argv: Sequence[str] | None = None) -> dict[int, float]:
    """``python -m sst_interp.record``; returns the accuracy per depth."""
    from sst_interp.record.runner import record

    args = parse_args(argv)
    try:
        return record(args)
    except KeyboardInterrupt:
        print("interrupted: completed batches are saved; rerun the same command to resume", file=sys.stderr)
        raise SystemExit(130) from None
