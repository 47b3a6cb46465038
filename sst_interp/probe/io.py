"""Saving and loading probes: safetensors weights plus a JSON sidecar (no pickle).

A saved probe is a folder holding ``probe.safetensors`` (``fc1.weight``, ``fc1.bias``,
``fc2.weight``, ``fc2.bias``; the linear probe has only ``fc2.*``) and ``probe.json``::

    {"format": "sst_interp.halting_probe", "format_version": 1,
     "config": {"input_size": ..., "hidden": ..., "activation": ..., "dims": ...},
     "layer": 15, "threshold": -0.8473, "max_depth": 4,
     "provenance": {"run": ..., "identity": ..., "train": {...}, ...},
     "package_version": "0.1.0"}

:func:`load_probe` accepts the folder, the ``.safetensors`` file or the ``.json`` file (the
other file is looked up next to it with the same stem).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save

from sst_interp import __version__
from sst_interp.kernels.errors import UsageError
from sst_interp.outputs import write_output
from sst_interp.probe.model import DEFAULT_THRESHOLD, HaltingProbe, ProbeConfig

FORMAT = "sst_interp.halting_probe"
FORMAT_VERSION = 1
WEIGHTS_NAME = "probe.safetensors"
META_NAME = "probe.json"


@dataclass(frozen=True)
class ProbeMeta:
    """What a saved probe records besides its weights.

    Args:
        layer: the decoder layer (0-based) whose position-0 output the probe reads.
        threshold: halt when the logit exceeds it (default ``log(0.3/0.7)``).
        max_depth: ``i_max``, the depth used when the probe never halts.
        provenance: training provenance (run path and identity, label counts, training config, report).
    """

    layer: int
    threshold: float = DEFAULT_THRESHOLD
    max_depth: int = 4
    provenance: dict[str, Any] = field(default_factory=dict)


def _paths(path: str | Path) -> tuple[Path, Path]:
    p = Path(path)
    if p.suffix == ".safetensors":
        return p, p.with_suffix(".json")
    if p.suffix == ".json":
        return p.with_suffix(".safetensors"), p
    return p / WEIGHTS_NAME, p / META_NAME


def save_probe(path: str | Path, probe: HaltingProbe, meta: ProbeMeta) -> Path:
    """Write ``probe`` and ``meta`` under ``path`` (a folder, created if needed) and return the folder.

    Both files are written to temporary names and renamed, so a crash leaves no half probe.
    """
    weights, sidecar = _paths(path)
    weights.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous().cpu() for k, v in probe.state_dict().items()}
    payload = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "config": probe.config.to_json(),
        "layer": int(meta.layer),
        "threshold": float(meta.threshold),
        "max_depth": int(meta.max_depth),
        "provenance": meta.provenance,
        "package_version": __version__,
    }
    text = json.dumps(payload, indent=2, sort_keys=True, default=_json_default)
    write_output(weights, save(tensors, metadata={"format": FORMAT}))
    write_output(sidecar, text + "\n")
    return weights.parent


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot store {type(value).__name__} in probe.json")


def load_probe(path: str | Path) -> tuple[HaltingProbe, ProbeMeta]:
    """Load a probe saved by :func:`save_probe`; a missing or inconsistent file is a UsageError."""
    weights, sidecar = _paths(path)
    for f in (weights, sidecar):
        if not f.is_file():
            raise UsageError(f"no probe at {path}: {f} is missing; train one with `python -m sst_interp.probe train`")
    try:
        payload = json.loads(sidecar.read_text())
    except json.JSONDecodeError as err:
        raise UsageError(f"{sidecar} is not valid JSON ({err.msg}); re-save the probe") from err
    if payload.get("format") != FORMAT or payload.get("format_version") != FORMAT_VERSION:
        raise UsageError(
            f"{sidecar} is not a halting probe of format {FORMAT} v{FORMAT_VERSION}; re-train or re-save it"
        )
    config = ProbeConfig.from_json(payload["config"])
    probe = HaltingProbe(config)
    tensors = load_file(str(weights))
    expected = {k: tuple(v.shape) for k, v in probe.state_dict().items()}
    found = {k: tuple(v.shape) for k, v in tensors.items()}
    if expected != found:
        raise UsageError(f"{weights} does not match {sidecar}: weights {found}, config expects {expected}")
    probe.load_state_dict({k: v.to(torch.float32) for k, v in tensors.items()})
    probe.eval()
    meta = ProbeMeta(
        layer=int(payload["layer"]),
        threshold=float(payload["threshold"]),
        max_depth=int(payload["max_depth"]),
        provenance=dict(payload.get("provenance", {})),
    )
    return probe, meta
