"""Inputs for the report tests: a planted synthetic run, a matched baseline, an SST checkpoint and training logs.

The SST run has flat depths 1-4 with an explicit correctness matrix that gives six MUST HALT questions (so the
halting probe, its LOOCV and its ablations all have something to learn), sketch positions beyond the full window
(for the long-range heatmap and profile), and the synthetic halting feature at the probe layer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from safetensors.numpy import save_file

from sst_interp.synthetic import PlantedTruth, SyntheticSpec, write_synthetic_run

T, F = True, False
#: [question, depth 1..4] correctness; MUST HALT questions: 1, 2, 3, 7, 10, 11.
CORRECT = np.array([
    [T, T, T, T], [T, F, F, F], [F, T, F, F], [F, F, T, F], [F, T, T, T], [F, F, F, F],
    [T, T, F, F], [T, F, T, F], [F, F, F, T], [T, T, T, T], [F, T, F, T], [T, F, F, T],
])
N_QUESTIONS = len(CORRECT)
CKPT_LAYERS, CKPT_D = 8, 48
A_MIN, A_MAX, THETA_INIT = 0.015, 0.10, -1.8


def sst_spec(seed: int = 11, depths: tuple[int, ...] = (1, 2, 3, 4)) -> SyntheticSpec:
    """The SST run's spec (small: 12 questions, 5 layers, d = 128)."""
    correct = CORRECT[:, [d - 1 for d in depths]]
    return SyntheticSpec(n_questions=N_QUESTIONS, depths=depths, full_positions=6, sketch_positions=10,
                         extra_tokens=4, num_layers=5, hidden_size=128, top_k=32, vocab_size=2048,
                         batch_questions=N_QUESTIONS, seed=seed, correct=correct, flip_prob_basin=0.5,
                         flip_prob_stable=0.1)


def write_sst_run(path: Path, seed: int = 11, depths: tuple[int, ...] = (1, 2, 3, 4)) -> PlantedTruth:
    """Write the SST run at ``path``."""
    return write_synthetic_run(path, sst_spec(seed, depths))


def write_baseline_run(path: Path) -> PlantedTruth:
    """A single-depth run over the same question ids (a matched baseline): correct on every even question."""
    correct = (np.arange(N_QUESTIONS) % 2 == 0)[:, None]
    spec = SyntheticSpec(n_questions=N_QUESTIONS, depths=(1,), full_positions=2, num_layers=5, hidden_size=128,
                         top_k=32, vocab_size=2048, batch_questions=N_QUESTIONS, seed=99, correct=correct)
    return write_synthetic_run(path, spec)


def theta_matrix(seed: int = 3) -> np.ndarray:
    """The checkpoint's theta: ``[CKPT_LAYERS, CKPT_D]``, init plus a layer trend and noise."""
    rng = np.random.default_rng(seed)
    trend = np.linspace(0.0, 0.3, CKPT_LAYERS)[:, None]
    return (THETA_INIT + trend + 0.2 * rng.normal(size=(CKPT_LAYERS, CKPT_D))).astype(np.float32)


def write_checkpoint(folder: Path, theta: np.ndarray) -> Path:
    """An SST checkpoint folder in the format of :mod:`sst_interp.model.checkpoint` (config + safetensors)."""
    folder.mkdir(parents=True, exist_ok=True)
    layers, d = theta.shape
    tensors = {}
    for i in range(layers):
        tensors[f"layers.{i}.theta"] = np.ascontiguousarray(theta[i])
        tensors[f"layers.{i}.state_norm_weight"] = np.ones(d, dtype=np.float32)
    save_file(tensors, str(folder / "sst_state.safetensors"))
    sst = {"a_min": A_MIN, "a_max": A_MAX, "theta_init": THETA_INIT, "update": "direct", "state_scale": "unit",
           "layers": None, "state_norm_eps": 1e-6}
    meta = {"format_version": 1, "sst": sst, "backbone": "synthetic", "num_layers": layers, "hidden_size": d,
            "stateful_layers": list(range(layers)), "package_version": "test", "extra": {}}
    (folder / "sst_config.json").write_text(json.dumps(meta))
    return folder


def write_training_logs(root: Path, steps: int = 60) -> tuple[Path, Path]:
    """An SST training folder (train_log.csv + alpha_log.csv) and a baseline one (train_log.csv).

    The columns are those :mod:`sst_interp.train.logs` writes (importing it would load the training stack);
    validation loss every 10 steps, alpha statistics at step 1 and every 10 steps for 4 layers.
    """
    rng = np.random.default_rng(0)
    folders = []
    for name, is_sst in (("sst_train", True), ("base_train", False)):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        rows, alpha_rows = [], []
        for step in range(1, steps + 1):
            loss = 2.0 * np.exp(-step / 20) + 1.0 + 0.05 * rng.normal() + (0.0 if is_sst else 0.05)
            rows.append({"step": step, "train_loss": loss, "val_loss": loss - 0.03 if step % 10 == 0 else None,
                         "lr_lora": 1e-4, "lr_sst": 1e-2 if is_sst else None, "grad_norm": 1.0, "tokens": 64,
                         "epoch": 0, "elapsed_s": float(step)})
            if is_sst and (step == 1 or step % 10 == 0):
                theta = THETA_INIT + 0.01 * step * rng.normal(size=(4, 16))
                alpha = A_MIN + (A_MAX - A_MIN) / (1 + np.exp(-theta))
                for layer in range(4):
                    a = alpha[layer]
                    row = {"step": step, "layer": layer, "mean": a.mean(), "std": a.std(), "min": a.min(),
                           "max": a.max()}
                    row.update({f"p{p}": np.percentile(a, p) for p in (5, 25, 50, 75, 95)})
                    alpha_rows.append(row)
        pd.DataFrame(rows).to_csv(folder / "train_log.csv", index=False)
        if alpha_rows:
            pd.DataFrame(alpha_rows).to_csv(folder / "alpha_log.csv", index=False)
        folders.append(folder)
    return folders[0], folders[1]


def write_tiny_run(path: Path, depths: tuple[int, ...] = (1, 2), seed: int = 0, n_questions: int = 3) -> PlantedTruth:
    """A very small run (for input-resolution and CLI tests that do not look at the analyses)."""
    spec = SyntheticSpec(n_questions=n_questions, depths=depths, full_positions=2, extra_tokens=2, num_layers=2,
                         hidden_size=32, top_k=8, vocab_size=512, batch_questions=n_questions, seed=seed)
    return write_synthetic_run(path, spec)


#: Label permutations of the LOOCV null while a test builds tab_halting_probe_loocv from these inputs: the library's
#: 100 (each retrains every fold) took 80 s of a whole report here; the null itself is tested in
#: tests/unit/probe/test_probe_permutation.py, and these tests read only the table's shape and presence.
FEW_PERMUTATIONS = 3


@contextmanager
def few_permutations() -> Iterator[None]:
    """Within the block the LOOCV measurement reruns :data:`FEW_PERMUTATIONS` label permutations."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sst_interp.probe.loocv.DEFAULT_PERMUTATIONS", FEW_PERMUTATIONS)
        yield

