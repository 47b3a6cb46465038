"""Reconcile a manifest with the files on disk before a resume, so that no block is ever recorded twice.

``status`` and the writer's ``batches`` index are written together, so they agree unless the manifest was edited
or damaged. Where they disagree the files decide:

- a question a listed batch holds but ``status`` lacks is complete again (its shards are there; resume's content
  checks still drop the batch if they fail), instead of being recorded a second time;
- a question ``status`` lists but no batch holds is incomplete (there is nothing to read), so it is recorded;
- a batch that holds a question an earlier batch at the same depth holds is a copy: it is dropped, and its other
  questions are recorded again;
- ``hidden_size``, ``top_k``, ``dtype`` and ``num_layers`` are set to what every listed shard agrees on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sst_interp.store import consistency, discovery
from sst_interp.store import manifest as mf
from sst_interp.store.discovery import ShardFile
from sst_interp.store.errors import CorruptRunError
from sst_interp.store.validate import read_footer


def reconcile(path: Path, manifest: dict[str, Any], redo: dict[int, list[str]], removed: list[str]) -> list[str]:
    """Make ``manifest`` (changed in place) agree with the files at ``path``; returns what was changed, in words.
    Question ids to record again are added to ``redo``, deleted shard files to ``removed``."""
    changes = _layout(path, manifest)
    status = manifest.setdefault("status", {})
    for key, batches in manifest.get("batches", {}).items():
        held: set[str] = set()
        for batch in list(batches):
            copies = held & set(batch["question_ids"])
            if copies:
                for shard in batch["shards"].values():
                    if (path / shard["file"]).exists():
                        (path / shard["file"]).unlink()
                        removed.append(shard["file"])
                batches.remove(batch)
                again = [q for q in batch["question_ids"] if q not in held]
                status[key] = [q for q in status.get(key, []) if q not in again]
                if again:
                    redo.setdefault(int(key), []).extend(again)
                changes.append(f"batch {batch['batch']} at depth {key} repeats {len(copies)} question(s) of an "
                               "earlier batch: dropped")
                continue
            held.update(batch["question_ids"])
        done = status.get(key, [])
        restored = [q for b in batches for q in b["question_ids"] if q not in set(done)]
        orphans = [q for q in done if q not in held]
        if restored or orphans:
            status[key] = [q for q in done if q in held] + restored
            if orphans:
                redo.setdefault(int(key), []).extend(orphans)
            changes.append(f"depth {key}: {len(restored)} recorded question(s) back in status, {len(orphans)} with "
                           "no batch recorded again")
    for key in [k for k in status if k not in manifest.get("batches", {})]:
        if status[key]:
            redo.setdefault(int(key), []).extend(status[key])
            changes.append(f"depth {key}: {len(status[key])} question(s) with no batch recorded again")
        # no entry rather than an empty one: the writer adds a depth's entry with its first batch, so a repaired
        # manifest equals the one an undamaged run has
        del status[key]
    return changes


def _layout(path: Path, manifest: dict[str, Any]) -> list[str]:
    """Set the layout keys to the values every listed shard's footer agrees on."""
    listed = mf.listed_shards(manifest)
    shards = []
    for kind, depth, rel in discovery.shard_paths(path):
        if rel not in listed:
            continue
        try:
            shards.append(ShardFile(kind, depth, rel, read_footer(path / rel)))
        except CorruptRunError:
            continue  # resume's own checks drop its batch
    _, corrected = consistency.layout_findings(manifest, shards)
    changes = []
    for key in ("hidden_size", "top_k", "dtype", "num_layers"):
        if key in corrected and corrected[key] != manifest.get(key):
            changes.append(f"{key} {manifest.get(key)!r} -> {corrected[key]!r} (what the shards hold)")
            manifest[key] = corrected[key]
    return changes
