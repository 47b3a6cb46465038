"""``python -m sst_interp.probe`` (also ``sst-probe``):
``{train,evaluate,sweep,loocv,ablate} --run runs/X [--layer L] [--out DIR]`` (and ``policies``: the per-position
depth policy sweep, :mod:`sst_interp.cli.policies`).

* ``train``: label the run, train the probe at the layer, save it (safetensors + JSON) and its
  evaluation tables (``tab:halting_probe``, ``tab:halting_probe_per_iter``, ``fig:halt_signal`` data).
* ``evaluate``: evaluate a saved probe (``--probe PATH``) on the run, or train one first.
* ``sweep``: ``tab:halting_probe_layer_sweep`` over ``--layers`` (default: the paper's layers scaled
  to the model) with LOOCV at ``--loocv-layers``.
* ``loocv``: ``app:halting_loocv`` at the layer, plus Cover's bound.
* ``ablate``: neuron analysis (``tab:halting_probe_ablation_sweep``), input-dimension analysis
  (``tab:halting_probe_topk_sweep``, ``tab:halting_probe_greedy_prune``, ``fig:feature_position_grid``),
  the linear probe on the essential set, and optionally the activation swap.

Tables are written as CSV files named after the paper labels (``tab_halting_probe.csv``, ...)
plus ``summary.json``; the main table is printed. Default ``--out``: ``<run>/probe/layer<L>``
(``<run>/probe/sweep`` for ``sweep``). Bad input prints one ``error: ...`` line and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace

from sst_interp.cli.args import add_config_flags, config_from_namespace, config_parser
from sst_interp.cli.policies import main as policies_main
from sst_interp.kernels.errors import UsageError, cli_entry
from sst_interp.probe.options import AblateConfig, LayerSweepConfig, LoocvConfig, ProbeRunConfig

#: Subcommand -> (its help, the dataclass of its own flags or None).
SUBCOMMANDS: dict[str, tuple[str, type | None]] = {
    "train": ("train, save and evaluate a probe", None),
    "evaluate": ("evaluate a saved probe (or train one)", None),
    "sweep": ("layer sweep", LayerSweepConfig),
    "loocv": ("leave-one-MUST-HALT-question-out cross-validation", LoocvConfig),
    "ablate": ("neuron and input-dimension ablations", AblateConfig),
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: one subcommand each, with the :class:`~sst_interp.probe.options.ProbeRunConfig` flags
    plus its own config's."""
    parser = config_parser("python -m sst_interp.probe", __doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (text, options) in SUBCOMMANDS.items():
        command = sub.add_parser(name, help=text, description=text)
        add_config_flags(command, ProbeRunConfig)
        if options is not None:
            add_config_flags(command, options)
    return parser


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m sst_interp.probe`` and ``sst-probe``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["policies"]:  # a command module of its own (sst_interp/cli/policies.py)
        return policies_main(argv[1:])
    args = build_parser().parse_args(argv)
    default_hidden = 64 if args.command in ("sweep", "ablate") else 10
    cfg = config_from_namespace(ProbeRunConfig, args)
    cfg = replace(cfg, hidden=default_hidden if cfg.hidden is None else cfg.hidden)
    if cfg.hidden < 1 or cfg.epochs < 1:
        raise UsageError(f"--hidden and --epochs must be >= 1, got {cfg.hidden} and {cfg.epochs}")
    # the jobs (torch) are imported after the flags are parsed: --help stays fast
    from sst_interp.probe import jobs

    if args.command == "train":
        if cfg.probe is not None:
            raise UsageError("train makes a new probe; use `evaluate --probe PATH` to evaluate a saved one")
        result = jobs.train_job(cfg)
    elif args.command == "evaluate":
        result = jobs.train_job(cfg, evaluate_only=True)
    elif args.command == "sweep":
        result = jobs.sweep_job(cfg, config_from_namespace(LayerSweepConfig, args))
        print(f"held-out choice: layer {result.summary['heldout_layer']} ({result.summary['heldout_reason']})")
    elif args.command == "loocv":
        result = jobs.loocv_job(cfg, config_from_namespace(LoocvConfig, args))
    else:
        result = jobs.ablate_job(cfg, config_from_namespace(AblateConfig, args))
    _print_tables(args.command, result.tables)
    print(f"wrote {result.out}")
    return 0


#: The tables each subcommand prints (the others are only written).
PRINTED = {"train": ("tab_halting_probe",), "evaluate": ("tab_halting_probe",),
           "sweep": ("tab_halting_probe_layer_sweep",), "loocv": ("app_halting_loocv",),
           "ablate": ("tab_halting_probe_ablation_sweep", "tab_halting_probe_topk_sweep",
                      "tab_halting_probe_greedy_prune")}


def _print_tables(command: str, tables: dict) -> None:
    """Print the subcommand's tables (``ablate`` names each one, as it prints several)."""
    for name in PRINTED[command]:
        if name not in tables:
            continue
        text = tables[name].to_string(index=False)
        print(f"{name}:\n{text}\n" if command == "ablate" else text)


def console() -> int:
    """The ``sst-probe`` console script."""
    return main()
