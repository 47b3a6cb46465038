"""``python -m sst_interp.probe {train,evaluate,sweep,loocv,ablate} --run runs/X [--layer L] [--out DIR]``.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sst_interp.errors import UsageError, cli_entry
from sst_interp.probe.dataset import PAPER_SWEEP_LAYERS, ProbeData, load_probe_data, load_probe_data_layers
from sst_interp.probe.model import ACTIVATIONS, DEFAULT_THRESHOLD, HaltingProbe, ProbeConfig
from sst_interp.probe.train import TrainConfig


@dataclass(frozen=True)
class CliConfig:
    """Options shared by every subcommand (one field per flag).

    Args:
        command: the subcommand.
        run: path of the run directory.
        layer: probe layer (None: the paper's layer 15 of 62 at the same depth fraction).
        out: output folder (None: the default under the run).
        hidden: probe bottleneck width.
        activation: probe activation.
        threshold: halting threshold on the logit.
        epochs: training epochs.
        seed: training seed.
        probe: a saved probe to evaluate or ablate instead of training one.
    """

    command: str
    run: Path
    layer: int | None
    out: Path | None
    hidden: int
    activation: str
    threshold: float
    epochs: int
    seed: int
    probe: Path | None


def _int_list(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError as err:
        raise UsageError(f"expected comma-separated integers, got {text!r}") from err


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (subcommands share the run/layer/out/probe options)."""
    parser = argparse.ArgumentParser(prog="python -m sst_interp.probe", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--run", required=True, type=Path, help="run directory (recorded at flat depths 1..i_max)")
    common.add_argument("--layer", type=int, default=None, help="probe layer, 0-based (default: paper's 15/62 scaled)")
    common.add_argument("--out", type=Path, default=None, help="output folder (default: <run>/probe/layer<L>)")
    common.add_argument("--hidden", type=int, default=None, help="probe width (default 10; 64 for sweep and ablate)")
    common.add_argument("--activation", default="silu", choices=sorted(ACTIVATIONS))
    common.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, help="halt when logit > this")
    common.add_argument("--epochs", type=int, default=60)
    common.add_argument("--seed", type=int, default=42)
    common.add_argument("--probe", type=Path, default=None, help="saved probe (folder or .safetensors)")
    sub.add_parser("train", parents=[common], help="train, save and evaluate a probe")
    sub.add_parser("evaluate", parents=[common], help="evaluate a saved probe (or train one)")
    sweep = sub.add_parser("sweep", parents=[common], help="layer sweep")
    sweep.add_argument("--layers", default=None, help="comma-separated layers (default: the paper's, scaled)")
    sweep.add_argument("--loocv-layers", default="", help="comma-separated layers to run LOOCV at")
    cv = sub.add_parser("loocv", parents=[common], help="leave-one-MUST-HALT-question-out cross-validation")
    cv.add_argument("--criterion", default="outcome", choices=("outcome", "detection"))
    ablate = sub.add_parser("ablate", parents=[common], help="neuron and input-dimension ablations")
    ablate.add_argument("--ks", default=None, help="comma-separated K grid for the top-K sweep")
    ablate.add_argument("--keep", default="10,15,20,30", help="keep-top-N neuron counts")
    ablate.add_argument("--top", type=int, default=10, help="size of the top ensemble for the complementary ablation")
    ablate.add_argument("--linear-loocv", action="store_true", help="LOOCV of the linear probe on the essential set")
    ablate.add_argument("--activation-swap", action="store_true", help="retrain with SiLU/GELU/ReLU (+ LOOCV)")
    return parser


def _write(out: Path, tables: dict[str, pd.DataFrame], summary: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, table in tables.items():
        table.to_csv(out / f"{name.replace(':', '_')}.csv", index=False)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True, default=_plain) + "\n")


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def _open_run(path: Path) -> Any:
    from sst_interp.store import Run

    return Run.open(path)


def _default_out(cfg: CliConfig, layer: int | str) -> Path:
    if cfg.out is not None:
        return cfg.out
    return cfg.run / "probe" / (f"layer{layer}" if isinstance(layer, int) else layer)


def _probe_for(cfg: CliConfig, data: ProbeData, hidden: int) -> tuple[HaltingProbe, dict[str, Any]]:
    """Load ``--probe`` or train a fresh one on ``data``."""
    from sst_interp.probe.io import load_probe
    from sst_interp.probe.train import train_probe

    if cfg.probe is not None:
        probe, meta = load_probe(cfg.probe)
        if meta.layer != data.layer:
            raise UsageError(f"probe {cfg.probe} reads layer {meta.layer}, not {data.layer}; pass --layer {meta.layer}")
        return probe, {"loaded": str(cfg.probe), **meta.provenance}
    data.labels.require_must_halt()
    config = ProbeConfig(data.hidden_size, hidden=hidden, activation=cfg.activation)
    probe, report = train_probe(data.x, data.y, config, TrainConfig(epochs=cfg.epochs, seed=cfg.seed))
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


def cmd_train(cfg: CliConfig, evaluate_only: bool = False) -> int:
    """``train`` and ``evaluate``."""
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


def cmd_sweep(cfg: CliConfig, layers_text: str | None, loocv_text: str) -> int:
    """``sweep``."""
    from sst_interp.analyses._common import paper_layer
    from sst_interp.probe.sweeps import layer_sweep, select_layer

    run = _open_run(cfg.run)
    layers = (_int_list(layers_text) if layers_text
              else sorted({paper_layer(v, run.num_layers) for v in PAPER_SWEEP_LAYERS}))
    data = load_probe_data_layers(run, layers)
    config = ProbeConfig(run.hidden_size, hidden=cfg.hidden, activation=cfg.activation)
    sweep = layer_sweep(data, config, TrainConfig(epochs=cfg.epochs, seed=cfg.seed), _int_list(loocv_text),
                        cfg.threshold)
    out = _default_out(cfg, "sweep")
    _write(out, {"tab_halting_probe_layer_sweep": sweep.table()}, {"selected_layer": select_layer(sweep)})
    print(sweep.table().to_string(index=False))
    print(f"wrote {out}")
    return 0


def cmd_loocv(cfg: CliConfig, criterion: str) -> int:
    """``loocv``."""
    from sst_interp.probe.loocv import cover_bound, loocv

    run = _open_run(cfg.run)
    data = load_probe_data(run, cfg.layer)
    data.labels.require_must_halt()
    config = ProbeConfig(data.hidden_size, hidden=cfg.hidden, activation=cfg.activation)
    train_config = TrainConfig(epochs=cfg.epochs, seed=cfg.seed)
    result = loocv(data, config, train_config, cfg.threshold, criterion)  # type: ignore[arg-type]
    cover = cover_bound(cfg.hidden, len(data.labels.must_halt_questions))
    out = _default_out(cfg, data.layer)
    _write(out, {"app_halting_loocv": result.table(), "app_halting_loocv_folds": result.folds,
                 "cover_bound": cover.table()}, {"layer": data.layer, **result.table().to_dict("records")[0]})
    print(result.table().to_string(index=False))
    print(f"wrote {out}")
    return 0


def cmd_ablate(cfg: CliConfig, args: argparse.Namespace) -> int:
    """``ablate``."""
    from sst_interp.probe.ablation import neuron_analysis
    from sst_interp.probe.evaluate import evaluate_probe
    from sst_interp.probe.features import feature_grid, greedy_prune, topk_sweep, train_linear_on
    from sst_interp.probe.loocv import cover_bound, loocv
    from sst_interp.probe.sweeps import activation_swap

    run = _open_run(cfg.run)
    data = load_probe_data(run, cfg.layer)
    probe, _ = _probe_for(cfg, data, cfg.hidden)
    train_config = TrainConfig(epochs=cfg.epochs, seed=cfg.seed)
    tables: dict[str, pd.DataFrame] = {}
    summary: dict[str, Any] = {"layer": data.layer}
    if not probe.is_linear:
        neurons = neuron_analysis(probe, data, _int_list(args.keep), args.top, cfg.threshold)
        tables["tab_halting_probe_ablation_sweep"] = neurons.table()
        tables["halting_probe_neuron_contributions"] = neurons.contribution_table()
        summary.update(direction_r_gradient=neurons.direction_r_gradient,
                       direction_r_ablated=neurons.direction_r_ablated,
                       top4_share=neurons.mass_share(4), top10_share=neurons.mass_share(10))
    ks = _int_list(args.ks) if args.ks else None
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
        if args.linear_loocv:
            linear_cv = loocv(data, linear.config, train_config, cfg.threshold)
            summary["linear_probe_loocv"] = linear_cv.table().to_dict("records")[0]
    if not probe.is_linear:
        cover = cover_bound(probe.n_hidden, len(data.labels.must_halt_questions))
        summary["cover_bound"] = cover.table().to_dict("records")[0]
    if args.activation_swap:
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
    args = build_parser().parse_args(argv)
    default_hidden = 64 if args.command in ("sweep", "ablate") else 10
    cfg = CliConfig(
        command=args.command, run=args.run, layer=args.layer, out=args.out,
        hidden=default_hidden if args.hidden is None else args.hidden, activation=args.activation,
        threshold=args.threshold, epochs=args.epochs, seed=args.seed, probe=args.probe,
    )
    if cfg.hidden < 1 or cfg.epochs < 1:
        raise UsageError(f"--hidden and --epochs must be >= 1, got {cfg.hidden} and {cfg.epochs}")
    if args.command == "train":
        if cfg.probe is not None:
            raise UsageError("train makes a new probe; use `evaluate --probe PATH` to evaluate a saved one")
        return cmd_train(cfg)
    if args.command == "evaluate":
        return cmd_train(cfg, evaluate_only=True)
    if args.command == "sweep":
        return cmd_sweep(cfg, args.layers, args.loocv_layers)
    if args.command == "loocv":
        return cmd_loocv(cfg, args.criterion)
    return cmd_ablate(cfg, args)


if __name__ == "__main__":
    sys.exit(main())
