"""The trace check of a family recording (:mod:`sst_interp.model.loop_trace`), run before the run directory is
created or resumed, and paid once per model and declaration: a passed check is written into the run's manifest
(``loop.trace``, with its :func:`~sst_interp.model.loop_trace.trace_key`), and a resume whose key is the same reuses
it instead of running the model again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sst_interp.model.loop_trace import check_loop_trace, declaration_sha256, trace_key
from sst_interp.record.options import RecordOptions
from sst_interp.store.manifest import MANIFEST_NAME, read_manifest


def checked_trace(options: RecordOptions, model: Any, out: Path) -> dict[str, Any]:
    """The manifest's ``loop.trace`` for recording ``model`` (a
    :class:`~sst_interp.model.loop_model.LoopModel` loaded from ``options.model``, declared by ``options.loop`` or
    its family) into ``out``: the one a run at ``out`` already holds for the same key, else a new check's. A
    declaration the model does not follow is a UsageError, before anything is written."""
    key = trace_key(options.model, declaration_sha256(options.loop), model.loop.setting_values(model.config))
    previous = _previous_trace(Path(out))
    if previous is not None and previous.get("key") == key:
        return previous
    return check_loop_trace(model).to_manifest(key)


def _previous_trace(out: Path) -> dict[str, Any] | None:
    """The ``loop.trace`` of the run at ``out``, or None (no run, a run recorded before the check, or a manifest
    the resume will rebuild from the run's files: the check then runs again)."""
    if not (out / MANIFEST_NAME).is_file():
        return None
    try:
        manifest = read_manifest(out)
    except (OSError, json.JSONDecodeError):
        return None
    loop = manifest.get("loop") if isinstance(manifest, dict) else None
    trace = loop.get("trace") if isinstance(loop, dict) else None
    return trace if isinstance(trace, dict) else None
