"""The checks a spec passes before anything runs: what the model and the runs a spec reads must hold.

:func:`check_spec` refuses (UsageError, one line, reading no weights) a spec this model cannot take: layers it lacks,
a direction of another size, a reference run (``patch``, ``mean``, ``resample``) that is missing, of another hidden
size, or without the depth, positions, layers or iterations the site asks for. :func:`patch_runs` names the runs a
spec reads, for a recording's identity, and refuses the live sources a recording cannot lay out.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sst_interp.interventions.feature_edits import SIDECAR
from sst_interp.interventions.spec import READS_RUN, Intervention, InterventionSpec, Operation
from sst_interp.kernels.errors import UsageError
from sst_interp.store import Run


def check_spec(spec: InterventionSpec, num_layers: int, hidden_size: int) -> None:
    """Refuse (UsageError, one line) a spec this model cannot take: layers it lacks, a direction of another size, a
    patch run that is missing, of another hidden size, or without the depth asked for. Reads no weights."""
    for number, item in enumerate(spec.interventions, 1):
        bad = [layer for layer in (item.site.layers or ()) if layer >= num_layers]
        if bad:
            raise UsageError(f"intervention {number}: layers {bad} do not exist in a model with {num_layers} layers "
                             f"(0-{num_layers - 1})")
        if item.operation.kind == "add":
            direction = load_direction(item.operation)
            if tuple(direction.shape) != (hidden_size,):
                raise UsageError(f"intervention {number}: the direction has shape {tuple(direction.shape)}; this "
                                 f"model's states have d = {hidden_size}")
        if (item.operation.kind in READS_RUN or item.operation.run is not None) and not item.operation.live:
            _check_reference(number, item, hidden_size)


def _check_reference(number: int, item: Intervention, hidden_size: int) -> None:
    """The reference run of a patch, mean or resample holds hidden states of this model's size at the site."""

    kind, operation, site = item.operation.kind, item.operation, item.site
    run = Run.open(str(operation.run))
    where = f"intervention {number}: {kind}: {run.path}"
    if run.hidden_size != hidden_size:
        raise UsageError(f"{where} holds states of d = {run.hidden_size}; this model's are d = {hidden_size}")
    if operation.depth is not None and operation.depth not in run.depths:
        raise UsageError(f"{where} has no depth {operation.depth} (it holds {run.depths})")
    full = int(run.manifest.get("full_positions", 0))
    if full < 1:
        raise UsageError(f"{where} recorded no hidden states (full_positions 0); record it with --full-positions")
    if site.positions is not None and max(site.positions) >= full:
        raise UsageError(f"{where} holds hidden states only at positions 0-{full - 1}, not at positions "
                         f"{[p for p in site.positions if p >= full]}")
    if run.num_layers and site.layers is not None and max(site.layers) >= run.num_layers:
        raise UsageError(f"{where} has {run.num_layers} layers; the site asks for {list(site.layers)}")
    deepest = operation.depth or max(run.depths, default=0)
    wanted = [operation.source_iteration] if operation.source_iteration else list(site.iterations or ())
    if wanted and max(wanted) > deepest:
        raise UsageError(f"{where} holds iterations 1-{deepest} at depth {deepest}; the site asks for iteration "
                         f"{max(wanted)}")
    if kind == "resample" and len(recorded_questions(run)) < 2:
        raise UsageError(f"{where} holds fewer than 2 questions; resample needs another question to draw from")


def recorded_questions(run: Any) -> list[str]:
    """The question ids a run has recorded at any depth (its manifest's ``status``), sorted."""
    return sorted({str(q) for ids in run.manifest.get("status", {}).values() for q in ids})


def patch_runs(spec: InterventionSpec) -> dict[str, str]:
    """{run directory: sha256 of its manifest} of every run a spec reads states from (patch, mean, resample, a
    feature patch from a run) and {dictionary folder: sha256 of its sidecar} of every ``feature`` operation (part of
    a run's identity). A recording calls it for its identity, so it also refuses live sources there (UsageError, one
    line): record lays its batches out itself, and a row number would name whichever question landed in it."""
    out = {}
    for item in spec.interventions:
        if item.operation.kind == "map":
            raise UsageError(f"a 'map' intervention runs the Python function {item.operation.function!r}, which a "
                             f"recording cannot take from a spec file; use intervene(..., functions=...) in Python")
        if item.operation.live:
            raise UsageError(f"a live patch (source={item.operation.source!r}) reads a row of one Python batch, but a "
                             f"recording lays its batches out itself; record the source prompts and patch from that "
                             f"run (run=...), or use sst.intervene in Python")
        if item.operation.kind == "feature":
            # the sidecar records the sha256 of the SAELens files, so its own hash names the weights
            sidecar = Path(str(item.operation.dictionary)).resolve() / SIDECAR
            if not sidecar.is_file():
                raise UsageError(f"feature: {sidecar.parent} holds no dictionary ({SIDECAR} missing); pass a folder "
                                 f"written by python -m sst_interp.features train")
            out[str(sidecar.parent)] = hashlib.sha256(sidecar.read_bytes()).hexdigest()
        if (item.operation.kind in READS_RUN or item.operation.run is not None) and not item.operation.live:
            folder = Path(str(item.operation.run)).resolve()
            manifest = folder / "manifest.json"
            if not manifest.is_file():
                raise UsageError(f"patch run {folder} has no manifest.json; pass a run directory written by record")
            out[str(folder)] = hashlib.sha256(manifest.read_bytes()).hexdigest()
    return out


def load_direction(operation: Operation) -> torch.Tensor:
    if operation.direction is not None:
        return torch.tensor(operation.direction, dtype=torch.float32)
    path = Path(str(operation.direction_file))
    if not path.is_file():
        raise UsageError(f"direction file not found: {path}; pass a .npy file holding a [d] vector")
    try:
        array = np.load(path, allow_pickle=False)
    except ValueError as err:
        raise UsageError(f"{path}: not a .npy array ({err})") from err
    return torch.from_numpy(np.asarray(array, dtype=np.float32))
