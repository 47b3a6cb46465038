"""The jobs of ``python -m sst_interp.probe`` (:mod:`sst_interp.cli.probe`): train or evaluate a probe, the layer
sweep, LOOCV and the ablations, each configured by :mod:`sst_interp.probe.options` and each writing its tables as
CSV files named after the paper labels (``tab_halting_probe.csv``, ...) plus ``summary.json``.

Default output folder: ``<run>/probe/layer<L>`` (``<run>/probe/sweep`` for the sweep).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sst_interp.kernels.errors import UsageError
from sst_interp.outputs import write_output
from sst_interp.probe.ablation import neuron_analysis
from sst_interp.probe.dataset import load_probe_data, load_probe_data_layers
from sst_interp.probe.evaluate import evaluate_probe
from sst_interp.probe.features import feature_grid, greedy_prune, topk_sweep, train_linear_on
from sst_interp.probe.figures import halt_signal_data
from sst_interp.probe.io import ProbeMeta, load_probe, save_probe
from sst_interp.probe.loocv import cover_bound, loocv
from sst_interp.probe.model import ProbeConfig
from sst_interp.probe.options import AblateConfig, LayerSweepConfig, LoocvConfig, ProbeRunConfig
from sst_interp.probe.sweeps import activation_swap, layer_sweep, select_heldout_layer, select_layer, sweep_layers
from sst_interp.probe.train import TrainConfig, train_probe
from sst_interp.store import Run

if TYPE_CHECKING:
    import pandas as pd

    from sst_interp.probe.dataset import ProbeData
    from sst_interp.probe.model import HaltingProbe
    from sst_interp.probe.train import TrainConfig as ProbeTrainConfig


@dataclass(frozen=True)
class JobResult:
    """What a job wrote.

    Args:
        out: the output folder.
        tables: table name -> table (each written as ``<name>.csv``).
        summary: what ``summary.json`` holds.
    """

    out: Path
    tables: dict[str, Any]
    summary: dict[str, Any]


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
    return Run.open(path).check_tables()  # a damaged table is refused before any output


def _layer_data(cfg: ProbeRunConfig) -> ProbeData:
    """The probe data of ``--run`` at ``--layer`` (the run is checked first): how ``loocv`` and ``ablate`` start."""

    return load_probe_data(_open_run(cfg.run), cfg.layer)


def _train_config(cfg: ProbeRunConfig) -> ProbeTrainConfig:
    """The probe training config of ``--epochs`` and ``--seed``, shared by every probe a command trains."""

    return TrainConfig(epochs=cfg.epochs, seed=cfg.seed)


def _default_out(cfg: ProbeRunConfig, layer: int | str) -> Path:
    if cfg.out is not None:
        return cfg.out
    return cfg.run / "probe" / (f"layer{layer}" if isinstance(layer, int) else layer)


def _probe_for(cfg: ProbeRunConfig, data: ProbeData, hidden: int) -> tuple[HaltingProbe, dict[str, Any]]:
    """Load ``--probe`` or train a fresh one on ``data``."""

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


def train_job(cfg: ProbeRunConfig, evaluate_only: bool = False) -> JobResult:
    """``train`` (a new probe, saved with its evaluation) and ``evaluate`` (``evaluate_only``: ``cfg.probe`` when
    given, else a new probe, unsaved). ``cfg.hidden`` must be set."""

    run = _open_run(cfg.run)
    layer = cfg.layer
    if evaluate_only and cfg.probe is not None and layer is None:
        layer = load_probe(cfg.probe)[1].layer
    data = load_probe_data(run, layer)
    probe, provenance = _probe_for(cfg, data, cfg.hidden)
    out = _default_out(cfg, data.layer)
    tables, summary = _evaluation_tables(probe, data, cfg.threshold)
    if cfg.probe is None:
        meta = ProbeMeta(layer=data.layer, threshold=cfg.threshold, max_depth=data.labels.i_max, provenance=provenance)
        summary["probe"] = str(save_probe(out, probe, meta))
    summary = {"layer": data.layer, **summary}
    _write(out, tables, summary)
    return JobResult(out, tables, summary)


def _check_permutations(permutations: int, alpha: float) -> None:
    if permutations < 0:
        raise UsageError(f"--permutations must be >= 0, got {permutations}")
    if not 0 < alpha < 1:
        raise UsageError(f"--permutation-alpha must be between 0 and 1 (e.g. 0.05), got {alpha}")


def sweep_job(cfg: ProbeRunConfig, options: LayerSweepConfig) -> JobResult:
    """``sweep``: ``tab:halting_probe_layer_sweep`` and the selected layers (``selected_layer``, ``heldout_layer``,
    ``heldout_reason`` in the summary)."""

    _check_permutations(options.permutations, options.permutation_alpha)
    run = _open_run(cfg.run)
    layers = options.layers if options.layers else sweep_layers(run.num_layers)
    data = load_probe_data_layers(run, layers)
    config = ProbeConfig(run.hidden_size, hidden=cfg.hidden, activation=cfg.activation)
    sweep = layer_sweep(data, config, _train_config(cfg), options.loocv_layers,
                        cfg.threshold, permutations=options.permutations, permutation_seed=options.permutation_seed,
                        permutation_alpha=options.permutation_alpha)
    heldout, reason = select_heldout_layer(sweep)
    out = _default_out(cfg, "sweep")
    tables = {"tab_halting_probe_layer_sweep": sweep.table()}
    summary = {"selected_layer": select_layer(sweep), "heldout_layer": heldout, "heldout_reason": reason}
    _write(out, tables, summary)
    return JobResult(out, tables, summary)


def loocv_job(cfg: ProbeRunConfig, options: LoocvConfig) -> JobResult:
    """``loocv``: ``app:halting_loocv`` at the layer, its folds and Cover's bound."""

    _check_permutations(options.permutations, options.permutation_alpha)
    data = _layer_data(cfg)
    data.labels.require_must_halt()
    config = ProbeConfig(data.hidden_size, hidden=cfg.hidden, activation=cfg.activation)
    train_config = _train_config(cfg)
    result = loocv(data, config, train_config, cfg.threshold, options.criterion,  # type: ignore[arg-type]
                   permutations=options.permutations, permutation_seed=options.permutation_seed,
                   permutation_alpha=options.permutation_alpha)
    cover = cover_bound(cfg.hidden, len(data.labels.must_halt_questions))
    out = _default_out(cfg, data.layer)
    tables = {"app_halting_loocv": result.table(), "app_halting_loocv_folds": result.folds,
              "cover_bound": cover.table()}
    summary = {"layer": data.layer, **result.table().to_dict("records")[0]}
    _write(out, tables, summary)
    return JobResult(out, tables, summary)


def ablate_job(cfg: ProbeRunConfig, options: AblateConfig) -> JobResult:
    """``ablate``: the neuron analysis, the input-dimension analysis, the linear probe on the essential set and,
    when asked, the activation swap."""

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
    return JobResult(out, tables, summary)
