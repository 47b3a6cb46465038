"""``python -m sst_interp.intervene {window,trace,steer,attribute}``: the intervention experiments, one command each.

- ``window``: where the depth gain lives (deny iterations 2..k the state stream in sliding windows of layers);
- ``trace``: causal tracing across depths (patch depth k's states into depth 1: layer x position and layer x
  iteration heatmaps);
- ``steer``: steering the halt (add the halting probe's direction with a scale sweep);
- ``attribute``: trace's question by attribution patching: one forward and one backward pass per batch estimate
  every (layer, position, depth k's iteration) cell to first order; the top cells are then patched for real.

Each records its conditions as ordinary run directories under ``--out``/runs (rerunning the same command resumes
them; the three may share one ``--out`` and so its clean run), writes tidy Parquet/CSV tables and
``experiment-<kind>.json``; ``python -m sst_interp.report --experiment OUT``
puts its tables and heatmaps into the report. Bad input is one ``error:`` line and exit 2 before anything is
written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sst_interp.cli.args import add_config_flags, arg, config_from_namespace, config_parser, given_fields
from sst_interp.kernels.errors import UsageError, cli_entry

PROG = "python -m sst_interp.intervene"


@dataclass(frozen=True)
class CommonFlags:
    """Flags every experiment takes: what to record (as ``record`` does) and where."""

    out: Path = arg(help="experiment folder (created; rerunning the same command resumes it)")
    depth: int = arg(2, help="k: the depth compared with depth 1")
    questions: str = arg("demo", help="question set: demo | gsm8k | gpqa | math500 | humaneval")
    data: str | None = arg(None, help="local data file or folder for the question set")
    limit: int | None = arg(None, help="only the first N questions")
    ids: list[str] | None = arg(None, help="comma-separated question ids")
    model: str | None = arg(None, help="backbone (as record --model)")
    checkpoint: str | None = arg(None, help="SST checkpoint folder or name (demo-codeact)")
    demo_preset: bool | None = arg(None, help="untrained SST with state_scale='hidden' (as record)")
    protocol: str = arg("completion", choices=("completion", "codeact"), help="completion | codeact")
    max_new_tokens: int | None = arg(None, help="most tokens per answer (per model turn under codeact)")
    max_turns: int = arg(5, help="codeact: most model turns per episode")
    batch_size: int = arg(8, help="questions per batch")
    full_positions: int = arg(10, help="generated positions recorded in full")
    sketch_positions: int = arg(0, help="further positions recorded as sketches")
    top_k: int = arg(128, help="K of the recorded top-K logits (the answer log-probs are read there)")
    dtype: str = arg("auto", help="auto | float32 | bfloat16")
    device: str = arg("auto", help="cpu | cuda | auto")
    prompt_mode: str | None = arg(None, help="two_pass | sequential | none (default as record)")
    sandbox: str = arg("bwrap", choices=("bwrap", "subprocess"), help="how model code runs under codeact")


@dataclass(frozen=True)
class WindowFlags:
    """``window``'s own flags."""

    size: int = arg(4, help="layers per window")
    stride: int = arg(4, help="layers between consecutive windows' first layers")
    mode: str = arg("freeze", choices=("freeze", "zero", "mean", "resample"),
                    help="freeze: iterations 2..k read the state iteration 1 read | zero: state_in zeroed at 2..k | "
                         "mean: they read the clean run's mean state there | resample: another question's state")
    controls: list[str] = arg(default_factory=lambda: ["mean", "resample"],
                              help="baselines every window is also recorded under, beside --mode (default: "
                                   "mean,resample; none for no control)")
    resamples: int = arg(10_000, help="bootstrap resamples")
    seed: int = arg(0, help="bootstrap seed")
    logprob_position: int = arg(0, help="generated position whose clean depth-k token's log-prob change is measured "
                                        "(default 0: the first token)")


@dataclass(frozen=True)
class TraceFlags:
    """``trace``'s own flags."""

    positions: int = arg(6, help="look for the first depth-1/depth-k difference at positions 0..N-1")
    layers: str = arg("all", help="layers patched: all, or e.g. 0,3,5-7")
    target_position: int | None = arg(None, help="target depth k's token at this position, for questions whose "
                                                 "tokens agree before it (default: the first position where the "
                                                 "depths' tokens differ)")


@dataclass(frozen=True)
class AttributeFlags:
    """``attribute``'s own flags."""

    positions: int = arg(6, help="look for the first depth-1/depth-k difference at positions 0..N-1")
    layers: str = arg("all", help="layers attributed: all, or e.g. 0,3,5-7")
    target_position: int | None = arg(None, help="target depth k's token at this position (as trace)")
    verify_top: int = arg(5, help="cells (layer, position, source iteration) with the largest |mean estimate| "
                                  "patched for real, one forced generation each per batch; 0 for none")


@dataclass(frozen=True)
class SteerFlags:
    """``steer``'s own flags."""

    probe: Path = arg(help="a saved halting probe (python -m sst_interp.probe train)")
    scales: list[float] = arg(default_factory=lambda: [-1.0, -0.5, 0.5, 1.0],
                              help="scale sweep in units of the state's mean norm; write --scales=-1,1 when it "
                                   "starts with a minus (default: -1,-0.5,0.5,1)")
    steer_positions: str = arg("0", help="generated positions steered: all, or e.g. 0,1")
    resamples: int = arg(10_000, help="bootstrap resamples")
    seed: int = arg(0, help="bootstrap seed")
    logprob_position: int = arg(0, help="generated position whose clean depth-k token's log-prob change is measured "
                                        "(default 0: the first token)")
    random_directions: int = arg(3, help="control: this many random directions of the same norm (seeds 0..N-1), each "
                                         "steered at every scale; 0 for none")


COMMANDS: dict[str, tuple[type, str]] = {
    "window": (WindowFlags, "where the depth gain lives: deny iterations 2..k the state stream in layer windows"),
    "trace": (TraceFlags, "causal tracing across depths: patch depth k's states into depth 1"),
    "steer": (SteerFlags, "steering the halt: add the halting probe's direction with a scale sweep"),
    "attribute": (AttributeFlags, "attribution patching: first-order estimates of trace's patches over layer x "
                                  "position x iteration from one gradient, the top cells verified"),
}


def build_parser() -> argparse.ArgumentParser:
    """The parser: one sub-command per experiment, each with :class:`CommonFlags` and its own flags."""
    parser = config_parser(PROG, "The intervention experiments on latent iterations, one command each.")
    sub = parser.add_subparsers(dest="experiment", required=True, metavar="{window,trace,steer,attribute}")
    for name, (flags, text) in COMMANDS.items():
        command = sub.add_parser(name, help=text, description=text)
        add_config_flags(command, CommonFlags)
        add_config_flags(command, flags)
    return parser


def record_args(common: CommonFlags) -> Any:
    """The record options every condition shares (``depths``/``out``/``intervention`` are set per condition)."""
    from sst_interp.record.options import RecordOptions
    from sst_interp.sandbox import SandboxConfig

    fields = {name: getattr(common, name) for name in (
        "questions", "data", "limit", "ids", "model", "checkpoint", "demo_preset", "protocol", "max_new_tokens",
        "batch_size", "full_positions", "sketch_positions", "top_k", "dtype", "device", "prompt_mode")}
    if common.protocol == "codeact":
        fields["max_turns"] = common.max_turns
    return RecordOptions(depths=[common.depth], sandbox=SandboxConfig(backend=common.sandbox), **fields)


def _positions(text: str) -> tuple[int, ...] | None:
    if text.strip() == "all":
        return None
    try:
        values = tuple(sorted({int(v) for v in text.split(",") if v.strip()}))
    except ValueError as err:
        raise UsageError(f"--steer-positions {text!r}: write all or positions like 0,1") from err
    if not values or values[0] < 0:
        raise UsageError(f"--steer-positions {text!r}: write all or positions >= 0 like 0,1")
    return values


def library_config(name: str, common: CommonFlags, own: Any, num_layers: int | None = None) -> Any:
    """The experiment's typed config from the flags (``num_layers`` resolves ``trace --layers``)."""
    from sst_interp.experiments.setup import parse_layers

    if name == "window":
        from sst_interp.experiments.window import WindowConfig

        controls = () if [c.strip() for c in own.controls] == ["none"] else tuple(own.controls)
        if "resample" in controls and common.limit == 1:
            # refused before the clean run is recorded, not after: resample draws another question's state
            raise UsageError("--controls resample draws the state of another question, and --limit 1 leaves one; "
                             "raise --limit or pass --controls mean")
        return WindowConfig(depth=common.depth, size=own.size, stride=own.stride, mode=own.mode, controls=controls,
                            resamples=own.resamples, seed=own.seed, logprob_position=own.logprob_position)
    if name == "attribute":
        from sst_interp.experiments.attribution import AttributionConfig

        layers = None if num_layers is None else parse_layers(own.layers, num_layers)
        return AttributionConfig(depth=common.depth, positions=own.positions, layers=layers,
                                 target_position=own.target_position, verify_top=own.verify_top)
    if name == "trace":
        from sst_interp.experiments.trace import TraceConfig

        layers = None if num_layers is None else parse_layers(own.layers, num_layers)
        return TraceConfig(depth=common.depth, positions=own.positions, layers=layers,
                           target_position=own.target_position)
    from sst_interp.experiments.steer import SteerConfig

    return SteerConfig(probe=own.probe, depth=common.depth, scales=tuple(own.scales),
                       positions=_positions(own.steer_positions), resamples=own.resamples, seed=own.seed,
                       logprob_position=own.logprob_position, random_directions=own.random_directions)


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m sst_interp.intervene``."""
    namespace = build_parser().parse_args(argv)
    name = namespace.experiment
    common = config_from_namespace(CommonFlags, namespace)
    own = COMMANDS[name][0](**given_fields(COMMANDS[name][0], namespace))
    from sst_interp.experiments import manifest as files
    from sst_interp.experiments import setup as experiment_setup

    files.check_out(common.out)
    config = library_config(name, common, own)
    if name == "steer":
        from sst_interp.probe.io import load_probe

        config.check()
        load_probe(config.probe)  # a missing or broken probe stops here, before the model loads
    elif name == "window":
        config.check()  # what needs no model; the layer bounds are checked once it is loaded
    setup = experiment_setup.load(record_args(common))
    config = library_config(name, common, own, setup.num_layers)
    if name == "window":
        from sst_interp.experiments.window import run_window

        config.check(setup.num_layers, setup.base.full_positions, setup.sst.config.update)
        table = run_window(setup, common.out, config)
    elif name == "attribute":
        from sst_interp.experiments.attribution import TIMING, VERIFIED, run_attribution

        config.check(setup.num_layers, setup.base.full_positions)
        tables = run_attribution(setup, common.out, config)
        timing = tables[TIMING]
        print(f"attribution pass / clean pass: {timing['attribution_pass_s'].sum() / timing['clean_pass_s'].sum():.2f}"
              f" ({timing['sites'].sum()} sites; real patching takes one forced generation per site)",
              file=sys.stderr)
        table = tables[VERIFIED]
    elif name == "trace":
        from sst_interp.experiments.trace import LAYER_POSITION, run_trace

        config.check(setup.num_layers, setup.base.full_positions)
        table = run_trace(setup, common.out, config)[LAYER_POSITION]
    else:
        from sst_interp.experiments.steer import probe_direction, run_steer

        probe_direction(config.probe, setup.sst.hidden_size, setup.num_layers)
        table = run_steer(setup, common.out, config)
    with_pandas_width(lambda: print(table.to_string(index=False)))
    print(f"wrote {common.out}/{files.manifest_name(name)}; python -m sst_interp.report --experiment {common.out} adds it to "
          f"the report", file=sys.stderr)
    return 0


def with_pandas_width(show: Any) -> None:
    """Print a table without pandas wrapping its columns."""
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_columns", 40):
        show()


def console() -> int:
    """The ``sst-intervene`` console script."""
    return main()
