"""manifest.json of a run directory: atomic rewrite, identity comparison and shard bookkeeping.

Layout of the manifest (JSON object):

- ``schema_version``, ``identity`` (what must match to resume: model, checkpoint, data sha256, ...),
  ``package_version`` and the caller's extra keys (``hidden_size``, ``num_layers``, ``dtype``, ``depths``,
  ``full_positions``, ``sketch_positions``, ``sketch_k``, ``top_k``, ``decoding``, ``prompt_mode``,
  ``depth_policy``, ...);
- ``status``: ``{depth: [question ids complete at that depth]}`` (JSON keys are strings);
- ``batches``: ``{depth: [batch, ...]}`` where a batch is ``{"batch": int, "question_ids": [...],
  "shards": {kind: {"file": relative path, "bytes": int, "rows": int, "question_ids": [...], "sha256": hex}}}``.
  A shard holds one row group per question, in the order of its ``question_ids``, so one question is read
  without reading the whole shard.
- ``tables``: ``{"questions.parquet" | "generations.parquet" | "episodes.parquet": {"bytes": int, "sha256": hex}}``.

``batches`` and ``tables`` are the writer's own (a cache for resume and for ``verify``): docs/format.md makes
only ``schema_version``, ``depths``, ``num_layers``, ``hidden_size``, ``dtype``, ``top_k``, ``full_positions``,
``protocol``, ``prompt_mode`` and ``status`` a reader's to rely on (see :mod:`sst_interp.store.contract`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sst_interp.store.atomic import atomic_open

if TYPE_CHECKING:
    from sst_interp.store.integrity import Written

#: The command that rebuilds a run's manifest (named in every error that suggests it).
REPAIR_COMMAND = "python -m sst_interp.store repair"

MANIFEST_NAME = "manifest.json"
#: The run's tables, at the root of the run directory (the keys of ``tables``).
QUESTIONS_NAME = "questions.parquet"
GENERATIONS_NAME = "generations.parquet"
EPISODES_NAME = "episodes.parquet"
#: The keys that fix the shards' layout: a resume must be asked for the same values.
LAYOUT_KEYS = ("hidden_size", "num_layers", "dtype", "top_k", "sketch_k")
#: The keys the writer keeps itself, which a caller's extra keys may not set.
RESERVED_KEYS = ("schema_version", "identity", "status", "batches", "next_batch", "tables")


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically: temp file in the same directory, fsync, os.replace.

    Keys are sorted, so that the same content is always the same bytes: a manifest rewritten by a resume or rebuilt
    by ``store repair`` equals, byte for byte, the one an undamaged run wrote (a writer's batch entries otherwise
    keep the order they were built in, and a rewrite read back from JSON another)."""
    with atomic_open(path, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=1, sort_keys=True)
        handle.write("\n")
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """fsync a directory so a rename inside it is durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems do not support fsync on directories; the rename itself already happened
    finally:
        os.close(fd)


def read_manifest(directory: Path) -> dict[str, Any]:
    """Read ``directory/manifest.json``; raises FileNotFoundError or json.JSONDecodeError."""
    with open(directory / MANIFEST_NAME, encoding="utf-8") as handle:
        return json.load(handle)


def normalise(value: Any) -> Any:
    """JSON round trip, so values compare as they will be read back (tuples -> lists, int keys -> str)."""
    return json.loads(json.dumps(value, sort_keys=True))


def identity_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Keys whose values differ between two identities, as ``key: old -> new`` strings."""
    old_n, new_n = normalise(old), normalise(new)
    diffs = []
    for key in sorted(set(old_n) | set(new_n)):
        if old_n.get(key) != new_n.get(key):
            diffs.append(f"{key}: {old_n.get(key)!r} -> {new_n.get(key)!r}")
    return diffs


def listed_files(manifest: dict[str, Any]) -> set[str]:
    """Relative paths of every shard the manifest lists."""
    files = set()
    for batches in manifest.get("batches", {}).values():
        for batch in batches:
            for shard in batch["shards"].values():
                files.add(shard["file"])
    return files


def listed_shards(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Relative path -> the writer's index entry of every shard it lists (none for a run written by another tool;
    entries not in this writer's shape are not the writer's and are left out)."""
    listed: dict[str, dict[str, Any]] = {}
    batches = manifest.get("batches")
    for depth_batches in (batches.values() if isinstance(batches, dict) else []):
        for batch in depth_batches if isinstance(depth_batches, list) else []:
            shards = batch.get("shards") if isinstance(batch, dict) else None
            for shard in (shards.values() if isinstance(shards, dict) else []):
                if isinstance(shard, dict) and {"file", "bytes", "rows", "question_ids"} <= set(shard):
                    listed[shard["file"]] = shard
    return listed


def completed_pairs(manifest: dict[str, Any]) -> set[tuple[str, int]]:
    """``(question_id, depth)`` pairs the manifest marks complete."""
    return {(qid, int(depth)) for depth, ids in manifest.get("status", {}).items() for qid in ids}


def record_table(manifest: dict[str, Any], name: str, written: Written | None) -> None:
    """Record (or, with None, forget) a table's size and sha256 in the writer's part of the manifest."""
    recorded = manifest.setdefault("tables", {})
    if written is None:
        recorded.pop(name, None)
    else:
        recorded[name] = {"bytes": written.bytes, "sha256": written.sha256}
