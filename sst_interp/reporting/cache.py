"""Cache of artefact data under ``<out>/.cache``, keyed by the content of the inputs (JSON + Parquet, no pickle).

Keys:

- :func:`path_fingerprint` of a run directory (or any file or folder): sha256 over ``manifest.json``'s bytes and
  the relative path, size and mtime of every file below it, so a resumed or re-recorded run gets a new key while
  an untouched one keeps its key across report invocations.
- :func:`code_fingerprint`: sha256 of the source of the analysis code (``sst_interp.analyses``,
  ``sst_interp.probe``, the report's ``context`` and ``specs_*`` modules), so fixing an analysis invalidates its
  cached numbers while editing a figure's drawing code does not.
- an artefact's key hashes its name, the fingerprints of the inputs it needs and the code fingerprint.

Layout: ``.cache/data/<artefact>/<key>/meta.json`` plus one ``<table>.parquet`` per table (a table Parquet cannot
hold, e.g. a column mixing numbers and text, is stored as pandas' ``orient="table"`` JSON instead). A cached
:class:`NotApplicable` is ``meta.json`` alone. Saving a key removes that artefact's older keys.
``.cache/render.json`` remembers which data and drawing code each figure file was drawn from.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterable, Mapping
from io import BytesIO, StringIO
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

import sst_interp.analyses as analyses
import sst_interp.kernels as kernels
import sst_interp.probe as probe
from sst_interp.kernels.results import NotApplicable
from sst_interp.outputs import write_output
from sst_interp.reporting.artefacts import ArtefactData

FORMAT = 1


def _sha() -> Any:
    return hashlib.sha256()


def path_fingerprint(path: Path) -> str:
    """Content fingerprint of a file or folder: manifest bytes (when present) + every file's path, size, mtime."""
    path = Path(path)
    h = _sha()
    if path.is_file():
        st = path.stat()
        h.update(f"{path.name}\0{st.st_size}\0{st.st_mtime_ns}".encode())
        return h.hexdigest()
    manifest = path / "manifest.json"
    if manifest.is_file():
        h.update(manifest.read_bytes())
    for item in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = item.relative_to(path).as_posix()
        if rel.startswith(".") or "/." in rel:
            continue  # temporary files of an interrupted writer
        st = item.stat()
        h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def source_fingerprint(paths: Iterable[Path]) -> str:
    """sha256 of the bytes of every ``.py`` file under ``paths`` (files or folders), in path order."""
    h = _sha()
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        files.extend(sorted(p.rglob("*.py")) if p.is_dir() else [p])
    for f in files:
        if f.is_file():
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def code_fingerprint() -> str:
    """Fingerprint of the code that computes artefact data (module docstring)."""
    here = Path(__file__).parent
    # the kernels hold definitions the analyses compute with (correctness, eq:alpha, the statistics, the result
    # types), so they key the cache too.
    return source_fingerprint([Path(analyses.__file__).parent, Path(probe.__file__).parent,
                               Path(kernels.__file__).parent, here / "context.py", *sorted(here.glob("specs_*.py"))])


def make_key(parts: Mapping[str, Any]) -> str:
    """sha256 of the JSON of ``parts`` (first 20 hex digits)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON-able: {type(value).__name__}")


class ResultCache:
    """Artefact data on disk under ``root`` (``<out>/.cache``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _dir(self, name: str, key: str) -> Path:
        return self.root / "data" / name / key

    def load(self, name: str, key: str) -> ArtefactData | NotApplicable | None:
        """The cached data (or NotApplicable) of ``name`` at ``key``; None when absent or unreadable."""
        folder = self._dir(name, key)
        meta_path = folder / "meta.json"
        if not meta_path.is_file():
            return None
        try:
            meta = json.loads(meta_path.read_text())
            if meta.get("format") != FORMAT:
                return None
            if meta.get("not_applicable") is not None:
                return NotApplicable(meta["not_applicable"], meta.get("measurement", ""))
            tables = {}
            for table, fmt in meta["tables"].items():
                tables[table] = _read_table(folder / f"{table}.{fmt}", fmt)
            return ArtefactData(tables, meta["meta"])
        except (OSError, ValueError, KeyError, pa.ArrowException):
            return None  # a damaged cache entry is recomputed, never trusted

    def save(self, name: str, key: str, data: ArtefactData | NotApplicable) -> None:
        """Store ``data`` under ``key`` (atomically: written to a temporary folder, then renamed)."""
        final = self._dir(name, key)
        tmp = final.with_name(f".{key}.tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        try:
            if isinstance(data, NotApplicable):
                meta: dict[str, Any] = {"format": FORMAT, "not_applicable": data.reason,
                                        "measurement": data.measurement}
            else:
                formats = {table: _write_table(frame, tmp / table) for table, frame in data.tables.items()}
                meta = {"format": FORMAT, "tables": formats, "meta": data.meta}
            write_output(tmp / "meta.json", json.dumps(meta, indent=1, default=_plain))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # no half-written entry left in the cache
            raise
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        for other in final.parent.iterdir():
            if other.name != key and not other.name.startswith("."):
                shutil.rmtree(other, ignore_errors=True)

    # ------------------------------------------------------------------------------------------ renders
    def _render_path(self) -> Path:
        return self.root / "render.json"

    def render_keys(self) -> dict[str, str]:
        """{artefact name: key of the data + drawing code its figure files were drawn from}."""
        try:
            return json.loads(self._render_path().read_text())
        except (OSError, ValueError):
            return {}

    def save_render_keys(self, keys: Mapping[str, str]) -> None:
        """Persist the render keys."""
        self.root.mkdir(parents=True, exist_ok=True)
        write_output(self._render_path(), json.dumps(dict(keys), indent=1, sort_keys=True))


def _write_table(frame: pd.DataFrame, stem: Path) -> str:
    frame = frame.copy()
    frame.attrs = {}
    buffer = BytesIO()
    try:
        frame.to_parquet(buffer, index=False)
    except (pa.ArrowException, TypeError, ValueError):  # a column Parquet cannot hold: JSON keeps it
        write_output(stem.with_suffix(".json"), frame.reset_index(drop=True).to_json(orient="table", index=False))
        return "json"
    write_output(stem.with_suffix(".parquet"), buffer.getvalue())
    return "parquet"


def _read_table(path: Path, fmt: str) -> pd.DataFrame:
    if fmt == "parquet":
        return pd.read_parquet(path)
    return pd.read_json(StringIO(path.read_text()), orient="table")
