"""An experiment folder's results: tidy tables (Parquet + CSV) and ``experiment-<kind>.json``, its manifest.

The three experiments may share one folder (and so its clean run, recorded once when their record options
agree); each writes its own manifest and tables. ``experiment-<kind>.json``::

    {"format": "sst_interp.intervention_experiment", "format_version": 1,
     "experiment": "window" | "trace" | "steer" | "attribute",
     "config": {...},                               # the experiment's typed config
     "record": {...},                               # the record options every condition shares
     "conditions": {"clean": {"path": "runs/clean", "manifest_sha256": "...", "depths": [1, 4],
                              "spec": null | {...}}, ...},
     "sources": {"probe": {"path": "...", "sha256": "..."}},   # other inputs read (steer's probe)
     "tables": {"window": {"parquet": "window.parquet", "csv": "window.csv", "sha256": "..."}, ...},
     "package_version": "..."}

Paths of conditions are relative to the experiment folder; the sha256 of each condition's ``manifest.json`` pins
the exact run (its manifest records the sha256 of every file it holds).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pandas as pd

from sst_interp import __version__
from sst_interp.kernels.errors import UsageError
from sst_interp.outputs import write_output

FORMAT = "sst_interp.intervention_experiment"
FORMAT_VERSION = 1
KINDS = ("window", "trace", "steer", "attribute")


def manifest_name(kind: str) -> str:
    """The manifest file of experiment ``kind`` in its folder."""
    return f"experiment-{kind}.json"


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def condition_entry(out: Path, folder: Path, spec: Any | None) -> dict[str, Any]:
    """The manifest entry of one condition run: its path (relative to ``out``), manifest sha256, depths, spec."""
    from sst_interp.store import Run

    run = Run.open(folder)
    return {"path": str(Path(folder).resolve().relative_to(Path(out).resolve())),
            "manifest_sha256": file_sha256(Path(folder) / "manifest.json"), "depths": list(run.depths),
            "spec": None if spec is None else spec.to_dict()}


def write_table(out: Path, name: str, frame: pd.DataFrame) -> dict[str, str]:
    """Write ``frame`` as ``<name>.parquet`` and ``<name>.csv`` under ``out``; returns their manifest entry."""
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    parquet = write_output(Path(out) / f"{name}.parquet", buffer.getvalue())
    write_output(Path(out) / f"{name}.csv", frame.to_csv(index=False))
    return {"parquet": parquet.name, "csv": f"{name}.csv", "sha256": file_sha256(parquet)}


def write_manifest(out: Path, kind: str, config: Any, record: Any, conditions: dict[str, Any],
                   tables: dict[str, Any], sources: dict[str, Any] | None = None) -> Path:
    """Write ``experiment-<kind>.json`` (see the module docstring)."""

    payload = {"format": FORMAT, "format_version": FORMAT_VERSION, "experiment": kind,
               "config": _plain(dataclasses.asdict(config)), "record": _plain(dataclasses.asdict(record)),
               "conditions": conditions, "sources": sources or {}, "tables": tables,
               "package_version": __version__}
    return write_output(Path(out) / manifest_name(kind), json.dumps(payload, indent=1, sort_keys=True) + "\n")


def check_out(out: Path) -> None:
    """Refuse an ``--out`` that is a file, or a non-empty folder that is not an experiment folder."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; pass a folder for the experiment")
    if out.is_dir() and not kinds_in(out) and any(p.name not in ("runs", "specs") for p in out.iterdir()):
        raise UsageError(f"--out {out} is not empty and holds no experiment-*.json; pass a new folder")


def kinds_in(folder: Path) -> list[str]:
    """The experiments whose manifests ``folder`` holds, in :data:`KINDS` order."""
    return [kind for kind in KINDS if (Path(folder) / manifest_name(kind)).is_file()]


def read_manifest(folder: Path, kind: str) -> dict[str, Any]:
    """The manifest of experiment ``kind`` in ``folder`` (UsageError when missing or not one)."""
    path = Path(folder) / manifest_name(kind)
    if not path.is_file():
        raise UsageError(f"{folder} holds no {kind} experiment ({path.name} is missing); write one with "
                         f"python -m sst_interp.intervene {kind}")
    try:
        data = json.loads(path.read_text())
    except ValueError as err:
        raise UsageError(f"{path}: not valid JSON ({err})") from err
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("experiment") != kind:
        raise UsageError(f"{path}: not an intervention experiment manifest")
    return data


def read_table(folder: Path, kind: str, name: str) -> pd.DataFrame:
    """A table of experiment ``kind`` in ``folder``, checked against the sha256 its manifest records."""
    entry = read_manifest(folder, kind)["tables"].get(name)
    if entry is None:
        raise UsageError(f"{folder}: the {kind} experiment has no table {name!r}")
    path = Path(folder) / entry["parquet"]
    if not path.is_file() or file_sha256(path) != entry["sha256"]:
        raise UsageError(f"{path}: missing or changed since the experiment wrote it (sha256 mismatch); rerun it")
    return pd.read_parquet(path)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value
