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
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sst_interp.cli.args import add_config_flags, arg, config_from_namespace, config_parser
from sst_interp.kernels.errors import UsageError, cli_entry
from sst_interp.probe.defaults import ACTIVATION_NAMES, DEFAULT_PERMUTATIONS, DEFAULT_THRESHOLD
from sst_interp.outputs import write_output

if TYPE_CHECKING:  # the probe itself (torch) is imported by each command, after the flags are parsed
    import pandas as pd

    from sst_interp.probe.dataset import ProbeData
    from sst_interp.probe.model import HaltingProbe
    from sst_interp.probe.train import TrainConfig as ProbeTrainConfig


@dataclass(frozen=True)
class ProbeFlags:
    """Options shared by every subcommand (one flag per field)."""

    run: Path = arg(help="run directory (recorded at flat depths 1..i_max)")
    layer: int | None = arg(None, help="probe layer, 0-based (default: the paper's layer 15 of 62 at the same depth "
                                       "fraction)")
    out: Path | None = arg(None, help="output folder (default: <run>/probe/layer<L>, <run>/probe/sweep for sweep)")
    # None until main() resolves it: the default width depends on the subcommand.
    hidden: int | None = arg(None, help="probe bottleneck width (default 10; 64 for sweep and ablate)")
    activation: str = arg("silu", choices=ACTIVATION_NAMES, help="probe activation")
    threshold: float = arg(DEFAULT_THRESHOLD, help="halt when the probe's logit is above this")
    epochs: int = arg(60, help="training epochs")
    seed: int = arg(42, help="training seed")
    probe: Path | None = arg(None, help="a saved probe (folder or .safetensors) to evaluate or ablate instead of "
                                        "training one")


@dataclass(frozen=True)
class SweepFlags:
    """Options of ``sweep``."""

    layers: list[int] | None = arg(None, help="comma-separated layers (default: the whole depth: every layer up to 32 "
                                        "layers, else 16 evenly spaced including the first and last)")
    loocv_layers: list[int] = arg(default_factory=list, help="comma-separated layers to run LOOCV at (default: none)")
    permutations: int = arg(DEFAULT_PERMUTATIONS, help="label permutations of the out-of-sample LOOCV null at the "
                                                       "--loocv-layers (0: the paper's binomial test only)")
    permutation_seed: int = arg(0, help="seed of the permutations")


@dataclass(frozen=True)
class LoocvFlags:
    """Options of ``loocv``."""

    criterion: str = arg("outcome", choices=("outcome", "detection"),
                         help="what counts as the held-out question classified correctly: outcome (it ends correct "
                              "in the halting simulation) or detection (all its MUST HALT timesteps are above the "
                              "threshold)")
    permutations: int = arg(DEFAULT_PERMUTATIONS, help="label permutations for the out-of-sample null (each retrains "
                                                       "every fold; 0: the paper's binomial test only)")
    permutation_seed: int = arg(0, help="seed of the permutations")


@dataclass(frozen=True)
class AblateFlags:
    """Options of ``ablate``."""

    ks: list[int] | None = arg(None, help="comma-separated K grid for the top-K sweep (default: powers of two and d)")
    keep: list[int] = arg(default_factory=lambda: [10, 15, 20, 30], help="comma-separated keep-top-N neuron counts")
    top: int = arg(10, help="size of the top ensemble for the complementary ablation")
    linear_loocv: bool = arg(False, help="LOOCV of the linear probe on the essential set")
    activation_swap: bool = arg(False, help="retrain with SiLU/GELU/ReLU (+ LOOCV)")


#: Subcommand -> (its help, the dataclass of its own flags or None).
SUBCOMMANDS: dict[str, tuple[str, type | None]] = {
    "train": ("train, save and evaluate a probe", None),
    "evaluate": ("evaluate a saved probe (or train one)", None),
    "sweep": ("layer sweep", SweepFlags),
    "loocv": ("leave-one-MUST-HALT-question-out cross-validation", LoocvFlags),
    "ablate": ("neuron and input-dimension ablations", AblateFlags),
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: one subcommand each, with the :class:`ProbeFlags` flags plus its own."""
    parser = config_parser("python -m sst_interp.probe", __doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (text, options) in SUBCOMMANDS.items():
        command = sub.add_parser(name, help=text, description=text)
        add_config_flags(command, ProbeFlags)
        if options is not None:
            add_config_flags(command, options)
    return parser


def _write(out: Path, tables: dict[str, pd.DataFrame], summary: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, table in tables.items():
        write_output(out / f"{name.replace(':', '_')}.csv", table.to_csv(index=False))
    write_output(out / "summary.json", json.dumps(summary, indent=2, sort_keys=True, default=_plain) + "\n")


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def _open_run(path: Path) -> Any:
    from sst_interp.store import Run

    return Run.open(path).check_tables()  # a damaged table is refused before any output


def _layer_data(cfg: ProbeFlags) -> ProbeData:
    """The probe data of ``--run`` at ``--layer`` (the run is checked first): how ``loocv`` and ``ablate`` start."""
    from sst_interp.probe.dataset import load_probe_data

    return load_probe_data(_open_run(cfg.run), cfg.layer)


def _train_config(cfg: ProbeFlags) -> ProbeTrainConfig:
    """The probe training config of ``--epochs`` and ``--seed``, shared by every probe a command trains."""
    from sst_interp.probe.train import TrainConfig

    return TrainConfig(epochs=cfg.epochs, seed=cfg.seed)


def _default_out(cfg: ProbeFlags, layer: int | str) -> Path:
    if cfg.out is not None:
        return cfg.out
    return cfg.run / "probe" / (f"layer{layer}" if isinstance(layer, int) else layer)


def _probe_for(cfg: ProbeFlags, data: ProbeData, hidden: int) -> tuple[HaltingProbe, dict[str, Any]]:
    """Load ``--probe`` or train a fresh one on ``data``."""
    from sst_interp.probe.model import ProbeConfig
    from sst_interp.probe.io import load_probe
    from sst_interp.probe.train import train_probe

    if cfg.probe is not None:
        probe, meta = load_probe(cfg.probe)
        if meta.layer != data.layer:
            raise UsageError(f"probe {cfg.probe} reads layer {meta.layer}, not {data.layer}; pass --layer {meta.layer}")
        return probe, {"loaded": str(cfg.probe), **meta.provenance}
    data.labels.require_must_halt()
    config = ProbeConfig(data.hidden_size, hidden=hidden, activation=cfg.activation)
    probe, report = train_probe(data.x, data.y, config, _train_config(cfg))
    provenance = {
        **data.source,
        "n_timesteps": len(data.y),
        "n_must_halt": data.labels.n_must_halt,
        "n_must_halt_questions": len(data.labels.must_halt_questions),
        "train": report.to_json(),
    }
    return probe, provenance


def _evaluation_tables(probe: HaltingProbe, data: ProbeData, threshold: float) -> tuple[dict, dict]:
    from sst_interp.probe.evaluate import evaluate_probe
    from sst_interp.probe.figures import halt_signal_data

    ev = evaluate_probe(probe, data, threshold)
    b, c, p = ev.outcome.mcnemar_vs_iter1()
    signal = halt_signal_data(ev, data)
    tables = {
        "tab_halting_probe": ev.outcome.table(),
        "tab_halting_probe_per_iter": ev.detection.table(),
        "halting_probe_depth_breakdown": ev.outcome.depth_breakdown(),
        "halting_probe_questions": ev.outcome.per_question(),
        "fig_halt_signal": signal.table(),
        "fig_halt_signal_summary": signal.summary(),
    }
    summary = {**ev.row(), "base_prediction_rate": ev.detection.base_prediction_rate,
               "mcnemar_vs_iter1": {"b": b, "c": c, "p_one_sided": p}}
    return tables, summary


def cmd_train(cfg: ProbeFlags, evaluate_only: bool = False) -> int:
    """``train`` and ``evaluate``."""
    from sst_interp.probe.dataset import load_probe_data
    from sst_interp.probe.io import ProbeMeta, save_probe

    run = _open_run(cfg.run)
    layer = cfg.layer
    if evaluate_only and cfg.probe is not None and layer is None:
        from sst_interp.probe.io import load_probe

        layer = load_probe(cfg.probe)[1].layer
    data = load_probe_data(run, layer)
    probe, provenance = _probe_for(cfg, data, cfg.hidden)
    out = _default_out(cfg, data.layer)
    tables, summary = _evaluation_tables(probe, data, cfg.threshold)
    if cfg.probe is None:
        meta = ProbeMeta(layer=data.layer, threshold=cfg.threshold, max_depth=data.labels.i_max, provenance=provenance)
        summary["probe"] = str(save_probe(out, probe, meta))
    _write(out, tables, {"layer": data.layer, **summary})
    print(tables["tab_halting_probe"].to_string(index=False))
    print(f"wrote {out}")
    return 0


def _check_permutations(permutations: int) -> None:
    if permutations < 0:
        raise UsageError(f"--permutations must be >= 0, got {permutations}")


def cmd_sweep(cfg: ProbeFlags, options: SweepFlags) -> int:
    """``sweep``."""
    from sst_interp.probe.dataset import load_probe_data_layers
    from sst_interp.probe.model import ProbeConfig
    from sst_interp.probe.sweeps import layer_sweep, select_heldout_layer, select_layer, sweep_layers

    _check_permutations(options.permutations)
    run = _open_run(cfg.run)
    layers = options.layers if options.layers else sweep_layers(run.num_layers)
    data = load_probe_data_layers(run, layers)
    config = ProbeConfig(run.hidden_size, hidden=cfg.hidden, activation=cfg.activation)
    sweep = layer_sweep(data, config, _train_config(cfg), options.loocv_layers,
                        cfg.threshold, permutations=options.permutations, permutation_seed=options.permutation_seed)
    heldout, reason = select_heldout_layer(sweep)
    out = _default_out(cfg, "sweep")
    _write(out, {"tab_halting_probe_layer_sweep": sweep.table()},
           {"selected_layer": select_layer(sweep), "heldout_layer": heldout, "heldout_reason": reason})
    print(f"held-out choice: layer {heldout} ({reason})")
    print(sweep.table().to_string(index=False))
    print(f"wrote {out}")
    return 0


def cmd_loocv(cfg: ProbeFlags, options: LoocvFlags) -> int:
    """``loocv``."""
    from sst_interp.probe.model import ProbeConfig
    from sst_interp.probe.loocv import cover_bound, loocv

    data = _layer_data(cfg)
    data.labels.require_must_halt()
    config = ProbeConfig(data.hidden_size, hidden=cfg.hidden, activation=cfg.activation)
    train_config = _train_config(cfg)
    _check_permutations(options.permutations)
    result = loocv(data, config, train_config, cfg.threshold, options.criterion,  # type: ignore[arg-type]
                   permutations=options.permutations, permutation_seed=options.permutation_seed)
    cover = cover_bound(cfg.hidden, len(data.labels.must_halt_questions))
    out = _default_out(cfg, data.layer)
    _write(out, {"app_halting_loocv": result.table(), "app_halting_loocv_folds": result.folds,
                 "cover_bound": cover.table()}, {"layer": data.layer, **result.table().to_dict("records")[0]})
    print(result.table().to_string(index=False))
    print(f"wrote {out}")
    return 0


def cmd_ablate(cfg: ProbeFlags, options: AblateFlags) -> int:
    """``ablate``."""
    from sst_interp.probe.ablation import neuron_analysis
    from sst_interp.probe.evaluate import evaluate_probe
    from sst_interp.probe.features import feature_grid, greedy_prune, topk_sweep, train_linear_on
    from sst_interp.probe.loocv import cover_bound, loocv
    from sst_interp.probe.sweeps import activation_swap

    data = _layer_data(cfg)
    probe, _ = _probe_for(cfg, data, cfg.hidden)
    train_config = _train_config(cfg)
    tables: dict[str, pd.DataFrame] = {}
    summary: dict[str, Any] = {"layer": data.layer}
    if not probe.is_linear:
        neurons = neuron_analysis(probe, data, options.keep, options.top, cfg.threshold)
        tables["tab_halting_probe_ablation_sweep"] = neurons.table()
        tables["halting_probe_neuron_contributions"] = neurons.contribution_table()
        summary.update(direction_r_gradient=neurons.direction_r_gradient,
                       direction_r_ablated=neurons.direction_r_ablated,
                       top4_share=neurons.mass_share(4), top10_share=neurons.mass_share(10))
    ks = options.ks if options.ks else None
    sweep = topk_sweep(probe, data, ks, cfg.threshold)
    tables["tab_halting_probe_topk_sweep"] = sweep.table()
    summary["minimal_k"] = sweep.minimal_k
    if sweep.minimal_k is not None:
        prune = greedy_prune(probe, data, sweep.minimal_k, cfg.threshold)
        tables["tab_halting_probe_greedy_prune"] = prune.table()
        tables["fig_feature_position_grid"] = feature_grid(prune.importance, prune.essential).table()
        summary["essential_dims"] = prune.essential.tolist()
        linear, _ = train_linear_on(data, prune.essential, train_config)
        summary["linear_probe"] = evaluate_probe(linear, data, cfg.threshold).row()
        if options.linear_loocv:
            linear_cv = loocv(data, linear.config, train_config, cfg.threshold)
            summary["linear_probe_loocv"] = linear_cv.table().to_dict("records")[0]
    if not probe.is_linear:
        cover = cover_bound(probe.n_hidden, len(data.labels.must_halt_questions))
        summary["cover_bound"] = cover.table().to_dict("records")[0]
    if options.activation_swap:
        tables["halting_probe_activation_swap"] = activation_swap(
            data, cfg.hidden if cfg.probe is None else max(probe.n_hidden, 1), train_config=train_config,
            threshold=cfg.threshold).table()
    out = _default_out(cfg, data.layer)
    _write(out, tables, summary)
    for name in ("tab_halting_probe_ablation_sweep", "tab_halting_probe_topk_sweep", "tab_halting_probe_greedy_prune"):
        if name in tables:
            print(f"{name}:\n{tables[name].to_string(index=False)}\n")
    print(f"wrote {out}")
    return 0


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m sst_interp.probe`` and ``sst-probe``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["policies"]:  # a command module of its own (sst_interp/cli/policies.py)
        from sst_interp.cli.policies import main as policies_main

        return policies_main(argv[1:])
    args = build_parser().parse_args(argv)
    default_hidden = 64 if args.command in ("sweep", "ablate") else 10
    cfg = config_from_namespace(ProbeFlags, args)
    cfg = replace(cfg, hidden=default_hidden if cfg.hidden is None else cfg.hidden)
    if cfg.hidden < 1 or cfg.epochs < 1:
        raise UsageError(f"--hidden and --epochs must be >= 1, got {cfg.hidden} and {cfg.epochs}")
    if args.command == "train":
        if cfg.probe is not None:
            raise UsageError("train makes a new probe; use `evaluate --probe PATH` to evaluate a saved one")
        return cmd_train(cfg)
    if args.command == "evaluate":
        return cmd_train(cfg, evaluate_only=True)
    if args.command == "sweep":
        return cmd_sweep(cfg, config_from_namespace(SweepFlags, args))
    if args.command == "loocv":
        return cmd_loocv(cfg, config_from_namespace(LoocvFlags, args))
    return cmd_ablate(cfg, config_from_namespace(AblateFlags, args))


def console() -> int:
    """The ``sst-probe`` console script."""
    return main()
