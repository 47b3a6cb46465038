"""Experiment c, steering the halt: add the halting probe's direction at its layer, with a scale sweep.

The direction u (unit length, [d]) is the probe's input direction that raises its halting logit: ``fc2.weight`` for
the linear probe, ``fc2.weight @ fc1.weight`` for the MLP probe (the logit's gradient with every hidden unit at
the same slope, which for SiLU is its slope at 0), with the probe's ``dims`` mapped back into d. A scale s adds
``s * r * u`` to ``layer_out`` of the probe's layer at the chosen positions (default: generated position 0, where
the probe reads) at iterations 2..k, where r is the mean L2 norm of that state (position 0, final iteration) in
the clean depth-k run: s = 1 moves the state by its own typical length. Positive s pushes towards "halt".

Each scale is one condition recorded at depth k. Against the clean run, per scale: accuracy at depth k,
overthinking (regressions: correct at clean depth 1, wrong at steered depth k) and recoveries (the reverse), with
their changes from the clean depth-k run's, the exact McNemar test of steered vs clean depth-k flips, and the
change of the clean depth-k answer's first-token log-prob (censored questions kept as bounds): its mean as a
number, its median with the 95% exact sign-test interval (none below 6 questions) and the exact sign test (none
below 6), Holm-adjusted over the scales, and the
flip rate with its Clopper-Pearson interval
(:mod:`sst_interp.experiments.intervals`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.analyses.intervention_effect import first_token_logprob_bounds
from sst_interp.experiments import manifest as files
from sst_interp.experiments.configs import SteerConfig
from sst_interp.experiments.effects import flip_and_logprob_columns, holm, planned_questions
from sst_interp.experiments.families import check_spec_for
from sst_interp.experiments.setup import Setup, condition_identity, record_condition
from sst_interp.experiments.tables import STEER_COLUMNS, STEER_TABLE
from sst_interp.interventions import Intervention, InterventionSpec, Operation, Site
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.outcomes import correctness_matrix
from sst_interp.probe.io import load_probe
from sst_interp.record.identity import folder_sha256
from sst_interp.store import Run

TABLE, COLUMNS = STEER_TABLE, STEER_COLUMNS
DIRECTION = "direction.npy"
#: The fewest must-halt training examples a probe may have learnt its direction from (the demo's had 1).
MIN_PROBE_POSITIVES = 5
#: The run identity keys that name the model a probe was trained on: the backbone and the checkpoint's weights.
MODEL_KEYS = ("model", "checkpoint_sha256")


def probe_direction(path: Path, hidden_size: int, num_layers: int) -> tuple[np.ndarray, int]:
    """(unit direction [d] float32, the probe's layer) of a saved probe; UsageError when it does not fit."""

    probe, meta = load_probe(path)
    if probe.config.input_size != hidden_size:
        raise UsageError(f"probe {path} reads states of d = {probe.config.input_size}; this model's are "
                         f"d = {hidden_size}")
    if not 0 <= meta.layer < num_layers:
        raise UsageError(f"probe {path} reads layer {meta.layer}; this model has {num_layers} layers")
    weight = probe.fc2.weight.detach().double()
    if probe.fc1 is not None:
        weight = weight @ probe.fc1.weight.detach().double()
    direction = np.zeros(hidden_size)
    direction[probe.dim_index.numpy()] = weight.numpy().ravel()
    norm = np.linalg.norm(direction)
    if norm == 0:
        raise UsageError(f"probe {path} has an all-zero input direction; nothing to steer along")
    return (direction / norm).astype(np.float32), int(meta.layer)


def check_probe_provenance(path: Path, identity: dict[str, Any]) -> None:
    """UsageError (one line) unless the probe at ``path`` was trained on a run of the model whose run identity is
    ``identity`` (same backbone and checkpoint weights: :data:`MODEL_KEYS`) and on at least
    :data:`MIN_PROBE_POSITIVES` must-halt examples."""

    provenance = load_probe(path)[1].provenance
    trained = provenance.get("identity")
    if not isinstance(trained, dict):
        raise UsageError(f"probe {path} records no run it was trained on, so its model cannot be checked; train it "
                         f"with `python -m sst_interp.probe train --run RUN` on a run of this model")
    for key in MODEL_KEYS:
        if trained.get(key) != identity.get(key):
            raise UsageError(f"probe {path} was trained on a run of another model ({key} {trained.get(key)!r}; this "
                             f"model's is {identity.get(key)!r}); train a probe on a run of this model")
    positives = provenance.get("n_must_halt")
    if positives is None or int(positives) < MIN_PROBE_POSITIVES:
        raise UsageError(f"probe {path} was trained on {positives} must-halt example(s); steering needs a direction "
                         f"learnt from at least {MIN_PROBE_POSITIVES}: record more questions for its run")


def state_norm(run: Any, depth: int, layer: int) -> float:
    """Mean L2 norm of ``layer``'s output at turn 0, position 0, final iteration, over the run's questions."""
    norms = []
    for block in run.hidden(depth, positions=[0], turn=0):
        layers = np.flatnonzero(block.layers == layer)
        if len(layers) == 0:
            continue
        values = block.values[0, :, layers[0]]
        recorded = np.flatnonzero(~np.isnan(values).any(axis=1))
        norms.append(float(np.linalg.norm(values[recorded[-1]])))
    if not norms:
        raise UsageError(f"{run.path} holds no hidden state of layer {layer} at position 0; record it in full")
    return float(np.mean(norms))


def steer_spec(direction_file: Path, layer: int, scale: float, depth: int,
               positions: tuple[int, ...] | None) -> InterventionSpec:
    """``scale`` times the direction in ``direction_file`` added to ``layer_out`` of ``layer`` at iterations 2..k."""
    site = Site("layer_out", layers=(layer,), positions=positions, iterations=tuple(range(2, depth + 1)))
    return InterventionSpec((Intervention(site, Operation("add", scale=float(scale),
                                                          direction_file=str(direction_file))),))


def run_steer(setup: Setup, out: Path, config: SteerConfig) -> pd.DataFrame:
    """Record the clean run and one run per non-zero scale; write the table and ``experiment-<kind>.json``."""

    config.check()
    direction, layer = probe_direction(config.probe, setup.sst.hidden_size, setup.num_layers)
    k = config.depth
    check_probe_provenance(Path(config.probe), condition_identity(setup, [1, k]))
    if setup.family is not None:
        # the sites, checked before the clean run is recorded: a family layer outside its loop has no iteration 2
        site = Site("layer_out", layers=(layer,), positions=config.positions, iterations=tuple(range(2, k + 1)))
        check_spec_for(setup.sst, InterventionSpec((Intervention(site, Operation(
            "add", direction=[0.0] * setup.sst.hidden_size)),)))
    clean_path = record_condition(setup, out, "clean", [1, k])
    clean = Run.open(clean_path)
    radius = state_norm(clean, k, layer)
    direction_file = Path(out) / DIRECTION
    direction_file.parent.mkdir(parents=True, exist_ok=True)
    np.save(direction_file, direction * np.float32(radius))  # the scale multiplies r * u
    conditions = {"clean": files.condition_entry(out, clean_path, None)}
    rows = [dict(_row(clean, clean, "clean", 0.0, k, config), direction="clean")]
    files_by_direction = {"probe": direction_file}
    for seed in range(config.random_directions):
        # the control: a direction drawn at random, scaled to the same norm r (so the same size of push)
        path = Path(out) / f"direction-random{seed}.npy"
        np.save(path, random_direction(setup.sst.hidden_size, seed) * np.float32(radius))
        files_by_direction[f"random {seed}"] = path
    for direction_name, path in files_by_direction.items():
        for scale in config.scales:
            if scale == 0:
                continue
            name = f"scale{scale:+g}" if direction_name == "probe" else f"{direction_name.replace(' ', '')}{scale:+g}"
            spec = steer_spec(path, layer, scale, k, config.positions)
            folder = record_condition(setup, out, name, [k], spec)
            conditions[name] = files.condition_entry(out, folder, spec)
            rows.append(dict(_row(clean, Run.open(folder), name, float(scale), k, config), direction=direction_name))
    table = _with_random_spread(pd.DataFrame(rows, columns=list(COLUMNS)))
    table = holm(table, table["direction"] == "probe")
    table = planned_questions(table, table["direction"] == "probe")
    tables = {TABLE: files.write_table(out, TABLE, table)}
    sources = {"probe": {"path": str(Path(config.probe).resolve()), "layer": layer, "state_norm": radius,
                         "sha256": _probe_sha(Path(config.probe))},
               "direction": {"path": DIRECTION, "sha256": files.file_sha256(direction_file)},
               "random_directions": {name: {"path": path.name, "sha256": files.file_sha256(path)}
                                     for name, path in files_by_direction.items() if name != "probe"}}
    files.write_manifest(out, "steer", config, setup.base, conditions, tables, sources)
    return table


def random_direction(hidden_size: int, seed: int) -> np.ndarray:
    """A unit direction [d] float32 drawn uniformly on the sphere with ``seed`` (the control's direction)."""
    vector = np.random.default_rng([int(seed), 30]).standard_normal(hidden_size)
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def _with_random_spread(table: pd.DataFrame) -> pd.DataFrame:
    """Probe rows get the spread (min, max over seeds) of the random directions' high-bound mean change at their
    scale; other rows NaN."""
    out = table.copy()
    random = out[out["direction"].str.startswith("random")]
    spread = random.groupby("scale")["logprob_change_bound_high"].agg(["min", "max"])
    probe = out["direction"] == "probe"
    out.loc[probe, "random_logprob_change_min"] = out.loc[probe, "scale"].map(spread["min"])
    out.loc[probe, "random_logprob_change_max"] = out.loc[probe, "scale"].map(spread["max"])
    return out


def _probe_sha(path: Path) -> str:
    return folder_sha256(path) if path.is_dir() else files.file_sha256(path)


def _row(clean: Any, run: Any, name: str, scale: float, k: int, config: SteerConfig) -> dict[str, object]:
    reference = correctness_matrix(clean)
    mine = correctness_matrix(run)[k]
    questions = [q for q in reference.index if q in set(mine.index)]
    shallow = reference.loc[questions, 1].to_numpy(bool)
    deep = reference.loc[questions, k].to_numpy(bool)
    steered = mine.loc[questions].to_numpy(bool)
    regressions, recoveries = int((shallow & ~steered).sum()), int((~shallow & steered).sum())
    broken, fixed = int((deep & ~steered).sum()), int((~deep & steered).sum())
    bounds = first_token_logprob_bounds(clean, run, k, questions, position=config.logprob_position)
    return {
        "condition": name, "scale": scale, "depth": k, "n_questions": len(questions),
        "accuracy_pct": 100.0 * steered.mean() if len(steered) else float("nan"),
        "regressions": regressions, "recoveries": recoveries,
        "regressions_change": regressions - int((shallow & ~deep).sum()),
        "recoveries_change": recoveries - int((~shallow & deep).sum()),
        **flip_and_logprob_columns(broken, fixed, len(questions), bounds),
    }
