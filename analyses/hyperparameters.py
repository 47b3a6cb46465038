"""tab:hyperparameters (app:training_setup): the training configurations of the SST and the matched baseline side by
side, read from each training output folder's own files.

A training output folder (``python -m sst_interp.train --out DIR``) holds ``train_config.json`` (``config``: every
:class:`~sst_interp.train.config.TrainConfig` field; ``train_sha256``/``val_sha256``: the data files' hashes),
``summary.json`` (best step, example counts, elapsed seconds, backbone) and, for an SST, ``best/sst_state.safetensors``
(the SST parameters, counted for the parameter row). The table lists every row of the paper's table, in its groups;
a cell the files do not record says so (``not recorded``). The paper's claim is that the SST and the baseline differ
only in the architecture: :data:`ARCHITECTURE_FIELDS` may differ, any other configuration field or data hash that
differs is flagged in the notes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.paper import alpha_init
from sst_interp.kernels.results import AnalysisResult

TRAIN_CONFIG = "train_config.json"
SUMMARY = "summary.json"
#: Fields that differ by design between the SST, its variants and the baseline (the architecture).
ARCHITECTURE_FIELDS = frozenset({"baseline", "theta_init", "a_min", "a_max", "update", "state_scale", "sst_layers",
                                 "lr_sst"})
#: Fields that name where a run wrote and how it was launched rather than what it trained, and the data files'
#: paths: each training writes (or is given) its own copy; the data are compared by their hashes.
INCIDENTAL_FIELDS = frozenset({"out", "threads", "device", "preset", "train_data", "val_data"})
NOT_RECORDED = "not recorded"
SST_ONLY = "n/a (SST only)"


@dataclass(frozen=True)
class TrainingRun:
    """One training output folder's saved configuration.

    Args:
        folder: the folder.
        config: ``train_config.json``'s ``config`` (TrainConfig fields).
        data: ``train_sha256`` and ``val_sha256``.
        summary: ``summary.json`` ({} when absent: a run that has not finished).
        sst_parameters: SST parameters in ``best/sst_state.safetensors`` (or the folder's own), None if absent.
    """

    folder: Path
    config: dict[str, Any]
    data: dict[str, Any]
    summary: dict[str, Any]
    sst_parameters: int | None

    @property
    def is_baseline(self) -> bool:
        """Trained with ``--baseline``."""
        return bool(self.config.get("baseline"))


def _sst_parameters(folder: Path) -> int | None:
    from safetensors import safe_open

    for state in (folder / "best" / "sst_state.safetensors", folder / "sst_state.safetensors"):
        if state.is_file():
            with safe_open(str(state), framework="numpy") as handle:
                total = 0
                for key in handle.keys():
                    count = 1
                    for size in handle.get_slice(key).get_shape():
                        count *= int(size)
                    total += count
            return total
    return None


def read_training_run(folder: str | Path) -> TrainingRun | None:
    """The saved configuration of a training output folder, or None when it has no ``train_config.json``.

    Raises:
        UsageError: ``train_config.json`` or ``summary.json`` is not valid JSON of the expected shape.
    """
    folder = Path(folder)
    path = folder / TRAIN_CONFIG
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text())
        summary = json.loads((folder / SUMMARY).read_text()) if (folder / SUMMARY).is_file() else {}
    except (OSError, ValueError) as err:
        raise UsageError(f"{folder}: its {TRAIN_CONFIG} or {SUMMARY} is not readable JSON ({err})") from err
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict) or not isinstance(summary, dict):
        raise UsageError(f"{path} holds no 'config' object; pass a folder written by python -m sst_interp.train")
    data = {k: meta.get(k) for k in ("train_sha256", "val_sha256")}
    return TrainingRun(folder, dict(meta["config"]), data, summary, _sst_parameters(folder))


def _lr_lora(c: Mapping[str, Any]) -> str:
    return f"{c['lr_lora']:g}, {c['warmup_steps']}-step linear warmup + cosine decay"


def _adaptation(c: Mapping[str, Any]) -> str:
    mode = c.get("quantize")
    return {"nf4": "QLoRA (NF4, frozen base)", "none": "LoRA (unquantised, frozen base)",
            "auto": "auto: QLoRA (NF4) on CUDA, LoRA otherwise (frozen base)"}.get(str(mode), str(mode))


def _memory(c: Mapping[str, Any]) -> str:
    parts = [f"chunked cross-entropy ({c['ce_chunk_size']} positions)"]
    if c.get("gradient_checkpointing"):
        parts.append("offloaded gradient checkpointing" if c.get("offload_checkpoints") else "gradient checkpointing")
    return ", ".join(parts)


def _summary(key: str, fmt: str = "{}") -> Any:
    def cell(r: TrainingRun) -> str:
        value = r.summary.get(key)
        return NOT_RECORDED if value is None else fmt.format(value)

    return cell


def _cfg(key: str, fmt: str = "{}") -> Any:
    return lambda r: fmt.format(r.config[key]) if key in r.config else NOT_RECORDED


def _effective(r: TrainingRun) -> str:
    c = r.config
    return str(int(c["micro_batch_size"]) * int(c["grad_accum"]) * int(r.summary.get("world_size", 1) or 1))


def _sst(cell: Any) -> Any:
    return lambda r: SST_ONLY if r.is_baseline else cell(r)


#: The paper's rows: (group, hyperparameter, the cell of one training run).
ROWS: tuple[tuple[str, str, Any], ...] = (
    ("Backbone", "Base model", lambda r: str(r.summary.get("backbone") or r.config.get("model"))),
    ("Backbone", "Adaptation", lambda r: _adaptation(r.config)),
    ("LoRA adapters", "Rank r", _cfg("lora_r")),
    ("LoRA adapters", "Scaling alpha", _cfg("lora_alpha", "{:g}")),
    ("LoRA adapters", "Dropout", _cfg("lora_dropout", "{:g}")),
    ("LoRA adapters", "Target modules", lambda r: ", ".join(r.config.get("lora_targets", []))),
    ("SST parameters", "Total parameter count", _sst(lambda r: NOT_RECORDED if r.sst_parameters is None
                                                     else f"{r.sst_parameters:,}")),
    ("SST parameters", "Precision", _sst(lambda r: f"float32 (compute dtype {r.config.get('dtype')})")),
    ("SST parameters", "Per-layer alpha logit init",
     _sst(lambda r: f"theta_init = {r.config['theta_init']:g} (alpha_init = "
                    f"{alpha_init(r.config['theta_init'], r.config['a_min'], r.config['a_max']):.4g})")),
    ("SST parameters", "Update mode", _sst(_cfg("update"))),
    ("Optimisation", "Optimiser", lambda r: "AdamW"),
    ("Optimisation", "LR (LoRA group)", lambda r: _lr_lora(r.config)),
    ("Optimisation", "LR (SST group)", _sst(lambda r: f"{r.config['lr_sst']:g}, constant")),
    ("Optimisation", "Weight decay", _cfg("weight_decay", "{:g}")),
    ("Optimisation", "Gradient clip (norm)", _cfg("max_grad_norm", "{:g}")),
    ("Optimisation", "Adam beta1, beta2, epsilon",
     lambda r: f"{r.config['adam_beta1']:g}, {r.config['adam_beta2']:g}, {r.config['adam_eps']:g}"),
    ("Batching", "Micro-batch size", _cfg("micro_batch_size")),
    ("Batching", "Gradient accumulation", _cfg("grad_accum")),
    ("Batching", "Effective batch size", _effective),
    ("Batching", "Max sequence length", lambda r: f"{r.config['max_seq_len']}"
                                                  + (" (packed)" if r.config.get("pack") else "")),
    ("Stopping", "Max steps", _cfg("max_steps")),
    ("Stopping", "Early stopping patience", _cfg("patience", "{} (on validation loss)")),
    ("Stopping", "Best checkpoint step", _summary("best_step")),
    ("Data", "Training examples", _summary("train_examples")),
    ("Data", "Validation examples", _summary("val_examples")),
    ("Data", "Example ordering", lambda r: "deterministic (no shuffle); train data sha256 "
                                           f"{str(r.data.get('train_sha256'))[:12]}"),
    ("Compute", "Hardware", lambda r: f"device {r.config.get('device')} (the card is not recorded)"),
    ("Compute", "Forward passes per step", lambda r: "1" if r.is_baseline else "2"),
    ("Compute", "Memory optimisations", lambda r: _memory(r.config)),
    ("Compute", "Active runtime (whole run)", _summary("elapsed_s", "{:.0f} s")),
)


@dataclass(frozen=True)
class Hyperparameters(AnalysisResult):
    """tab:hyperparameters: one column per training run, the paper's rows.

    Args:
        runs: column name (``SST (theta_init=-1.8, direct update)``, ``baseline``, ...) -> its saved configuration;
            the first is the reference the others are compared with.
    """

    label = "tab:hyperparameters"
    runs: dict[str, TrainingRun]

    def table(self) -> pd.DataFrame:
        """Columns: group, hyperparameter, then one per training run (text cells)."""
        rows = [{"group": group, "hyperparameter": name, **{col: cell(r) for col, r in self.runs.items()}}
                for group, name, cell in ROWS]
        return pd.DataFrame(rows)

    def differences(self) -> list[str]:
        """One line per configuration field or data hash that differs from the first run's where only the
        architecture should (:data:`ARCHITECTURE_FIELDS` are exempt)."""
        names = list(self.runs)
        ref = self.runs[names[0]]
        out = []
        for name in names[1:]:
            other = self.runs[name]
            keys = sorted((set(ref.config) | set(other.config)) - ARCHITECTURE_FIELDS - INCIDENTAL_FIELDS)
            for key in keys:
                if ref.config.get(key) != other.config.get(key):
                    out.append(f"DIFFERS: {key} is {ref.config.get(key)!r} for {names[0]} but {other.config.get(key)!r} "
                               f"for {name}; only the architecture should differ")
            for key in ("train_sha256", "val_sha256"):
                if ref.data.get(key) != other.data.get(key):
                    out.append(f"DIFFERS: {key.replace('_sha256', '')} data of {name} is not {names[0]}'s "
                               f"(sha256 {str(other.data.get(key))[:12]} vs {str(ref.data.get(key))[:12]})")
        return out

    def notes(self) -> list[str]:
        """Where each column came from, what the table cannot know, and the flagged differences."""
        notes = [f"{name}: {r.folder}" for name, r in self.runs.items()]
        notes.append("SST-only rows (the paper's dagger) read n/a for the baseline; exempt from the comparison: "
                     + ", ".join(sorted(ARCHITECTURE_FIELDS)))
        found = self.differences()
        return notes + (found or ["no field other than the architecture differs between the columns"])


def hyperparameters(runs: Mapping[str, TrainingRun]) -> Hyperparameters:
    """tab:hyperparameters of ``{column name: TrainingRun}`` (the first column is the reference)."""
    if not runs:
        raise UsageError("pass at least one training run")
    return Hyperparameters(dict(runs))
