"""``python -m sst_interp.intervene {window,trace,steer,attribute}``: the intervention experiments, one command each.

- ``window``: where the depth gain lives (deny iterations 2..k the state stream in sliding windows of layers);
- ``trace``: causal tracing across depths (patch depth k's states into depth 1: layer x position and layer x
  iteration heatmaps);
- ``steer``: steering the halt (add the halting probe's direction with a scale sweep);
- ``attribute``: trace's question by attribution patching: one forward and one backward pass per batch estimate
  every (layer, position, depth k's iteration) cell to first order; the top cells are then patched for real.

Each runs on an SST and on a natively looping family folder (HRM-Text, Inkling-2 Loop; what differs there:
:mod:`sst_interp.experiments.families`). Each records its conditions as ordinary run directories under ``--out``/runs (rerunning the same command resumes
them; the three may share one ``--out`` and so its clean run), writes tidy Parquet/CSV tables and
``experiment-<kind>.json``; ``python -m sst_interp.report --experiment OUT``
puts its tables and heatmaps into the report. Bad input is one ``error:`` line and exit 2 before anything is
written.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

from sst_interp.cli.args import add_config_flags, config_from_namespace, config_parser
from sst_interp.experiments.configs import (AttributionConfig, ExperimentOptions, SteerConfig, TraceConfig,
                                            WindowConfig)
from sst_interp.kernels.errors import UsageError, cli_entry

PROG = "python -m sst_interp.intervene"

COMMANDS: dict[str, tuple[type, str]] = {
    "window": (WindowConfig, "where the depth gain lives: deny iterations 2..k the state stream in layer windows"),
    "trace": (TraceConfig, "causal tracing across depths: patch depth k's states into depth 1"),
    "steer": (SteerConfig, "steering the halt: add the halting probe's direction with a scale sweep"),
    "attribute": (AttributionConfig, "attribution patching: first-order estimates of trace's patches over layer x "
                                     "position x iteration from one gradient, the top cells verified"),
}


def build_parser() -> argparse.ArgumentParser:
    """The parser: one sub-command per experiment, each with the
    :class:`~sst_interp.experiments.configs.ExperimentOptions` flags and its config's."""
    parser = config_parser(PROG, "The intervention experiments on latent iterations, one command each.")
    sub = parser.add_subparsers(dest="experiment", required=True, metavar="{window,trace,steer,attribute}")
    for name, (config_type, text) in COMMANDS.items():
        command = sub.add_parser(name, help=text, description=text)
        add_config_flags(command, ExperimentOptions)
        add_config_flags(command, config_type)
    return parser


def experiment_config(name: str, namespace: argparse.Namespace, common: ExperimentOptions) -> Any:
    """The experiment's config from the parsed flags, at the common ``--depth``; bad input is a UsageError."""
    config = dataclasses.replace(config_from_namespace(COMMANDS[name][0], namespace), depth=common.depth)
    if name == "window" and "resample" in config.controls and common.limit == 1:
        # refused before the clean run is recorded, not after: resample draws another question's state
        raise UsageError("--controls resample draws the state of another question, and --limit 1 leaves one; "
                         "raise --limit or pass --controls mean")
    return config


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m sst_interp.intervene``."""
    namespace = build_parser().parse_args(argv)
    name = namespace.experiment
    common = config_from_namespace(ExperimentOptions, namespace)
    from sst_interp.experiments import manifest as files
    from sst_interp.experiments import setup as experiment_setup

    files.check_out(common.out)
    config = experiment_config(name, namespace, common)
    if name == "steer":
        from sst_interp.probe.io import load_probe

        config.check()
        load_probe(config.probe)  # a missing or broken probe stops here, before the model loads
    elif name == "window":
        config.check()  # what needs no model; the layer bounds are checked once it is loaded
    setup = experiment_setup.load(common.record_options())
    if name in ("trace", "attribute"):  # the layers, checked against the loaded model
        config = dataclasses.replace(config, layers=experiment_setup.parse_layers(namespace.layers,
                                                                                  setup.num_layers))
    if name == "window":
        from sst_interp.experiments.window import run_window, window_axis

        window_axis(setup, config)  # the layers windows slide over, checked against this model
        table = run_window(setup, common.out, config)
    elif name == "attribute":
        from sst_interp.experiments.attribution import TIMING, VERIFIED, run_attribution

        config.check(setup.num_layers, setup.base.full_positions)
        tables = run_attribution(setup, common.out, config)
        timing = tables[TIMING]
        if timing["clean_pass_s"].sum() > 0:  # no pass was timed when no question has a target
            print(f"attribution pass / clean pass: "
                  f"{timing['attribution_pass_s'].sum() / timing['clean_pass_s'].sum():.2f} "
                  f"({timing['sites'].sum()} sites; real patching takes one forced generation per site)",
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
