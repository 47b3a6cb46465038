"""Rebuild a run's ``manifest.json`` from its shards and tables (``python -m sst_interp.store repair RUN``).

Every file the writer writes carries the run's settings in its footer (:mod:`sst_interp.store.stamp`); the rest of
the manifest is bookkeeping the files themselves hold:

- ``batches``: one per ``part-NNNNNN.parquet`` number and depth, its shards' question ids from their row-group
  statistics (the writer puts one question in each row group), sizes and sha256 computed afresh;
- ``status``: the questions of every batch whose shards pass their page checks and whose rows are in the tables
  (generations, and episodes where the run has that table), in batch order;
- ``tables``: size and sha256 of each table whose pages pass their checks.

Damage is never blessed (docs/format.md): where the manifest being replaced still reads, the sha256 it records for
a file is the truth. A shard whose bytes differ is removed; a table whose bytes differ (or whose footer does not
decode) is rebuilt from the rows that verify under a footer made afresh
(:func:`~sst_interp.store.salvage.salvage_table`), or, with nothing to salvage, left out of the manifest as it is
(``verify`` keeps reporting it). Only files with no recorded sha256 (the manifest is lost) are hashed as found, once
every page passes its CRC and the footer decodes.

A batch that cannot be kept (a shard with a damaged page, rows missing from a table, or a question another batch
already holds at that depth) has its shard files removed, as resume would: its questions are then simply not
recorded, and rerunning the same ``record`` command records them again.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import filelock

from sst_interp.kernels.errors import UsageError
from sst_interp.store import discovery, integrity, salvage, stamp
from sst_interp.store import manifest as mf
from sst_interp.store import schema as sch
from sst_interp.store.errors import CorruptRunError
from sst_interp.store.tables import write_table_atomic
from sst_interp.store.validate import check_table_file, read_footer

_PART = re.compile(r"^part-(\d+)\.parquet$")
BACKUP_NAME = "manifest.json.before-repair"


@dataclass
class RebuildReport:
    """What :func:`rebuild_manifest` did.

    Args:
        batches: batches in the rebuilt manifest.
        question_depths: completed (question, depth) pairs in its status.
        removed: relative paths of shard files left out of it and deleted (damaged, duplicated, or without their
            table rows); their questions are recorded again by the next ``record``.
        rebuilt: tables that failed verification, rewritten from their rows that verify under a new footer.
        backup: the relative path the previous manifest was moved to, if there was one.
    """

    batches: int = 0
    question_depths: int = 0
    removed: list[str] = field(default_factory=list)
    rebuilt: list[str] = field(default_factory=list)
    backup: str | None = None


def has_run_files(path: Path) -> bool:
    """True when ``path`` holds a table or a shard of a run (whether or not it has a manifest)."""
    return any((path / name).is_file() for name in discovery.TABLE_NAMES) or \
        next(discovery.shard_paths(path), None) is not None


def rebuild_manifest(path: str | Path) -> RebuildReport:
    """Write a new ``manifest.json`` for the run at ``path`` from its files (the old one, if any, is kept as
    ``manifest.json.before-repair``). Raises UsageError when ``path`` holds no run files or none of them carries
    the run's settings (files written by another tool or by a version before the stamp)."""
    path = Path(path)
    if not path.is_dir() or not has_run_files(path):
        raise UsageError(f"{path} holds no run files (no tables, no KIND/depth=D/*.parquet shards); pass the --out "
                         "of a record run")
    lock = filelock.FileLock(path / ".lock", timeout=0, thread_local=False)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise UsageError(f"another process is recording into {path}; wait for it to finish") from None
    try:
        return rebuild_files(path)
    finally:
        lock.release()


def rebuild_files(path: Path) -> RebuildReport:
    """:func:`rebuild_manifest` for a caller that already holds the run's lock (the writer, on resume)."""
    report = RebuildReport()
    trusted = _recorded_checksums(path)
    drop: list[str] = []  # removed only once the settings are known: a refused rebuild removes nothing
    settings, settings_batch = None, -1
    shards: dict[tuple[int, int], dict[str, dict[str, Any]]] = defaultdict(dict)
    for kind, depth, rel in discovery.shard_paths(path):
        match = _PART.match(Path(rel).name)
        if match is None:
            continue  # not a file of the writer's: left alone (verify lists it as not in the index)
        entry = _shard_entry(path, rel, trusted.get(rel))
        if entry is None:
            drop.append(rel)
            continue
        batch = int(match.group(1))
        meta = read_footer(path / rel)
        found = stamp.read_stamp(meta)
        if found is not None and batch > settings_batch:
            settings, settings_batch = found, batch  # the latest batch's: a resume may have added depths
        shards[(depth, batch)][kind] = entry
    rows: dict[str, set[tuple[str, int]] | None] = {}
    tables: dict[str, dict[str, Any]] = {}
    salvaged: dict[str, Any] = {}  # damaged tables' verified rows, written under a new footer below
    for name in discovery.TABLE_NAMES:
        target = path / name
        rows[name] = None
        if not target.is_file():
            continue
        sha256 = integrity.sha256_file(target)
        if _table_intact(target, sha256, trusted.get(name)):
            table = integrity.read_table(target)
            tables[name] = {"bytes": target.stat().st_size, "sha256": sha256}
            if settings is None:
                settings = stamp.read_stamp(read_footer(target))
        else:
            table = salvage.salvage_table(target, name)
            if table is not None:
                salvaged[name] = table
                report.rebuilt.append(name)
        if table is not None and name != "questions.parquet":
            rows[name] = {(q, int(d)) for q, d in zip(table.column("question_id").to_pylist(),
                                                        table.column("depth").to_pylist())}
    if settings is None:
        raise UsageError(f"cannot rebuild the manifest of {path}: none of its files carries the run's settings "
                         "(written by another tool or an older version); record the run again into a new --out")
    manifest = dict(settings)
    manifest.update(status={}, batches={}, tables=tables)
    seen: dict[int, set[str]] = defaultdict(set)
    for (depth, batch), kinds in sorted(shards.items()):
        question_ids = list(dict.fromkeys(q for kind in sch.KINDS if kind in kinds
                                          for q in kinds[kind]["question_ids"]))
        pairs = {(q, depth) for q in question_ids}
        has = {name: rows[name] is not None and pairs <= rows[name]
               for name in ("generations.parquet", "episodes.parquet")}
        complete = all(has[name] for name in has if rows[name] is not None)
        if not complete or seen[depth] & set(question_ids):
            drop.extend(entry["file"] for entry in kinds.values())
            continue
        seen[depth].update(question_ids)
        key = str(depth)
        manifest["batches"].setdefault(key, []).append({
            "batch": batch, "question_ids": question_ids, "shards": {k: kinds[k] for k in sch.KINDS if k in kinds},
            "generations": has["generations.parquet"], "episodes": has["episodes.parquet"]})
        manifest["status"].setdefault(key, []).extend(question_ids)
        report.batches += 1
        report.question_depths += len(question_ids)
    manifest["next_batch"] = 1 + max((b for _, b in shards), default=0)
    manifest["depths"] = sorted({int(d) for d in manifest.get("depths", [])}
                                | {int(d) for d in manifest["batches"]})
    for rel in drop:
        (path / rel).unlink()
        report.removed.append(rel)
    for name, table in salvaged.items():
        table = salvage.fresh(table, manifest)
        groups = None if name == "questions.parquet" else salvage.batch_row_groups(table, manifest)
        written = write_table_atomic(table, path / name, row_groups=groups)
        tables[name] = {"bytes": written.bytes, "sha256": written.sha256}
    target = path / mf.MANIFEST_NAME
    if target.exists():
        target.replace(path / BACKUP_NAME)
        report.backup = BACKUP_NAME
    mf.write_json_atomic(target, mf.normalise(manifest))
    return report


def _recorded_checksums(path: Path) -> dict[str, str]:
    """{relative path: sha256} the run's manifest records, when it still reads (else empty: nothing to trust)."""
    try:
        manifest = mf.read_manifest(path)
    except (OSError, ValueError):
        return {}  # lost or not JSON: the files are all there is
    if not isinstance(manifest, dict):
        return {}
    recorded = {rel: entry.get("sha256") for rel, entry in mf.listed_shards(manifest).items()
                if isinstance(entry, dict)}
    tables = manifest.get("tables")
    if isinstance(tables, dict):
        recorded.update({name: entry.get("sha256") for name, entry in tables.items() if isinstance(entry, dict)})
    return {rel: sha for rel, sha in recorded.items() if isinstance(sha, str)}


def _table_intact(target: Path, sha256: str, recorded: str | None) -> bool:
    """A table matches its recorded sha256 and its footer decodes; with none recorded, its pages pass too."""
    if recorded is not None and sha256 != recorded:
        return False
    try:
        check_table_file(target)
        if recorded is None:
            integrity.scan_pages(target)
    except CorruptRunError:
        return False  # rebuilt from what verifies, or left out
    return True


def _shard_entry(path: Path, rel: str, recorded: str | None = None) -> dict[str, Any] | None:
    """The writer's index entry for a shard whose footer and pages read, whose bytes match ``recorded`` (the
    sha256 the replaced manifest lists, if any) and whose row groups each hold one question (by their statistics);
    None otherwise."""
    target = path / rel
    try:
        meta = read_footer(target)
        integrity.scan_pages(target)
    except CorruptRunError:
        return None
    sha256 = integrity.sha256_file(target)
    if recorded is not None and sha256 != recorded:
        return None  # damage outside the pages (a footer, a page header): dropped, never hashed again
    column = meta.schema.to_arrow_schema().get_field_index("question_id")
    if column < 0:
        return None
    question_ids = []
    for group in range(meta.num_row_groups):
        only = discovery.single_value(meta.row_group(group).column(column).statistics)
        if only is None:
            return None
        question_ids.append(only)
    return {"file": rel, "bytes": target.stat().st_size, "rows": meta.num_rows, "question_ids": question_ids,
            "sha256": sha256}
