"""Resuming a run directory: check that it belongs to this command, and repair it before the writer continues.

:func:`resume_run` (what :meth:`~sst_interp.store.writer.RunWriter.create_or_resume` does with a run that is already
there, holding the run's lock) makes the files and the manifest agree before anything is recorded:

- the manifest is checked against the command's identity and layout keys (:func:`validated_manifest`), after the
  files have decided where an edited or damaged manifest disagrees with them (:mod:`sst_interp.store.reconcile`);
  a missing or unreadable manifest is first rebuilt from the files (:func:`rebuild_if_lost`);
- batches with a missing or damaged shard (size, footer, row count, sha256 or page checksums) are dropped and their
  questions recorded again;
- a damaged ``questions.parquet`` is removed (the writer writes it again from the same data); a damaged
  generations or episodes table is rebuilt from its rows that verify (:mod:`sst_interp.store.salvage`), and the
  batches whose rows were lost are recorded again; rows of incomplete questions (written before a kill) go;
- temporary files and shards the manifest does not list are removed.

What was found and done is the :class:`ResumeReport`. Damaged bytes are never written back (docs/format.md,
"Damage is never blessed").
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from sst_interp.kernels.errors import UsageError
from sst_interp.store import manifest as mf
from sst_interp.store import schema as sch
from sst_interp.store import integrity, rebuild, salvage, tables
from sst_interp.store.atomic import is_temp_name
from sst_interp.store.errors import CorruptRunError
from sst_interp.store.manifest import (
    EPISODES_NAME,
    GENERATIONS_NAME,
    LAYOUT_KEYS,
    QUESTIONS_NAME,
    RESERVED_KEYS,
    record_table,
)
from sst_interp.store.reconcile import reconcile
from sst_interp.store.validate import check_shard, check_table_file


@dataclass
class ResumeReport:
    """What create_or_resume found and cleaned.

    Args:
        resumed: True when an existing run was continued.
        removed: relative paths of temporary files and unlisted shards that were deleted.
        redo: ``{depth: [question ids]}`` whose listed shards were missing or damaged, so they are recorded
            again.
        damaged: relative paths of files that failed verification (sha256 or page checksums); their batches are
            in ``redo`` (a damaged questions.parquet is removed and written again by ``write_questions``).
        reconciled: what was changed to make the manifest agree with the files (:mod:`sst_interp.store.reconcile`),
            including a manifest rebuilt from the files because it was missing or unreadable.
        rebuilt: damaged tables (in ``damaged`` too) rewritten from their rows that verify, under a new footer.
    """

    resumed: bool = False
    removed: list[str] = field(default_factory=list)
    redo: dict[int, list[str]] = field(default_factory=dict)
    damaged: list[str] = field(default_factory=list)
    reconciled: list[str] = field(default_factory=list)
    rebuilt: list[str] = field(default_factory=list)


def validated_manifest(path: Path, identity: dict[str, Any], extra: dict[str, Any],
                        manifest: dict[str, Any] | None = None, later: tuple[str, ...] = ()) -> dict[str, Any]:
    """The manifest at ``path`` (or ``manifest``, already read) checked against this command's identity and the
    layout keys of ``extra``; UsageError naming what differs."""
    try:
        manifest = mf.read_manifest(path) if manifest is None else manifest
    except ValueError as err:
        raise CorruptRunError(f"{path / mf.MANIFEST_NAME} is not valid JSON ({err}); this run cannot be resumed, "
                              "pick another --out") from err
    if not isinstance(manifest, dict) or "identity" not in manifest or "status" not in manifest:
        raise UsageError(f"--out {path} holds a manifest.json that is not an sst-interp run; pick another --out")
    if manifest.get("schema_version") != sch.SCHEMA_VERSION:
        raise UsageError(f"run {path} has schema version {manifest.get('schema_version')}, this package writes "
                         f"{sch.SCHEMA_VERSION}; pick another --out")
    stored = manifest["identity"]
    if later and isinstance(stored, dict):
        stored = {key: value for key, value in stored.items() if key not in later}
        identity = {key: value for key, value in identity.items() if key not in later}
    diffs = mf.identity_differences(stored, identity)
    diffs += [f"{k}: {manifest.get(k)!r} -> {extra[k]!r}" for k in LAYOUT_KEYS
              if k in extra and k in manifest and mf.normalise(extra[k]) != manifest[k]]
    if diffs:
        raise UsageError(f"--out {path} holds a run with a different identity ({'; '.join(diffs[:3])}); "
                         "pick another --out, or rerun with the original settings to resume")
    return manifest


def manifest_lost(path: Path) -> bool:
    """True when ``path`` holds run files whose manifest.json is missing or not valid JSON."""
    target = path / mf.MANIFEST_NAME
    if target.exists():
        try:
            mf.read_manifest(path)
            return False
        except ValueError:
            pass  # not valid JSON: lost
    return rebuild.has_run_files(path)


def rebuild_if_lost(path: Path) -> list[str]:
    """Rebuild a missing or unreadable manifest from the run's files (the caller holds the run's lock)."""
    if not manifest_lost(path):
        return []
    done = rebuild.rebuild_files(path)
    return [f"manifest.json rebuilt from the files ({done.question_depths} question-depths)"]


def resume_run(path: Path, identity: dict[str, Any], extra: dict[str, Any]) -> tuple[dict[str, Any], ResumeReport]:
    manifest = validated_manifest(path, identity, {})
    on_disk = mf.normalise(manifest)
    report = ResumeReport(resumed=True)
    # the files decide where the manifest disagrees with them (an edited or damaged manifest), before the
    # layout is compared with this command's and before anything is recorded
    report.reconciled = reconcile(path, manifest, report.redo, report.removed)
    validated_manifest(path, identity, extra, manifest)
    _drop_missing_batches(path, manifest, report)
    _check_questions(path, manifest, report)
    _filter_generations(path, manifest, report)
    _remove_strays(path, manifest, report)
    updated = mf.normalise(manifest)
    recorded = {int(d) for d, ids in updated.get("status", {}).items() if ids}
    for key, value in mf.normalise(extra).items():
        if key == "depths":
            # a listed depth nothing recorded and this command does not ask for is dropped (an edited manifest)
            updated["depths"] = sorted(recorded | {int(d) for d in value})
        elif key not in RESERVED_KEYS:
            updated[key] = value
    if updated != on_disk or report.redo:
        mf.write_json_atomic(path / mf.MANIFEST_NAME, updated)
    return updated, report


def _drop_missing_batches(path: Path, manifest: dict[str, Any], report: ResumeReport) -> None:
    """Batches with a missing shard (deleted by the user after a CorruptRunError), a shard structurally damaged
    (truncated: size, footer or row count off) or a shard whose content fails verification (sha256, or page
    checksums where no sha256 is recorded) are dropped and redone: rerunning the command repairs every damage
    ``verify`` reports."""
    for depth, batches in manifest.get("batches", {}).items():
        for batch in list(batches):
            missing = [s for s in batch["shards"].values() if not (path / s["file"]).exists()]
            if missing:
                _drop_batch(path, manifest, depth, batch, report)
                continue
            damaged = [s["file"] for s in batch["shards"].values()
                       if not _structure_intact(path, s) or not _content_intact(path / s["file"], s)]
            if damaged:
                report.damaged.extend(damaged)
                _drop_batch(path, manifest, depth, batch, report)


def _structure_intact(path: Path, shard: dict[str, Any]) -> bool:
    """True when the shard's size, footer and row count are what the manifest lists (:func:`check_shard`)."""
    try:
        check_shard(path, shard)
    except CorruptRunError:
        return False  # the caller re-records what this file held
    return True


def _content_intact(target: Path, recorded: dict[str, Any] | None) -> bool:
    """True when ``target``'s bytes match the recorded sha256 or, with none recorded (runs from before
    checksums), when every page passes its CRC check."""
    if recorded is not None and "sha256" in recorded:
        return integrity.sha256_file(target) == recorded["sha256"]
    try:
        integrity.scan_pages(target)
    except CorruptRunError:
        return False  # the caller re-records what this file held
    return True


def table_intact(target: Path, recorded: dict[str, Any] | None) -> bool:
    """:func:`_content_intact` for a table, whose footer must also decode: a run whose damaged footer an earlier
    version rewrote and hashed again has a matching sha256 over metadata no reader can decode."""
    if not _content_intact(target, recorded):
        return False
    try:
        check_table_file(target)
    except CorruptRunError:
        return False  # the caller rebuilds the table from what verifies
    return True


def _check_questions(path: Path, manifest: dict[str, Any], report: ResumeReport) -> None:
    """A damaged questions.parquet is removed (and its record forgotten): write_questions, which every record
    command calls on resume, writes it again from the same data (the identity's data sha256 guarantees it)."""
    target = path / QUESTIONS_NAME
    if target.exists() and not table_intact(target, manifest.get("tables", {}).get(QUESTIONS_NAME)):
        target.unlink()
        report.damaged.append(QUESTIONS_NAME)
        record_table(manifest, QUESTIONS_NAME, None)


def _drop_batch(path: Path, manifest: dict[str, Any], depth: str, batch: dict[str, Any],
                report: ResumeReport) -> None:
    """Forget one committed batch: delete its shards and mark its questions incomplete (they are redone)."""
    for shard in batch["shards"].values():
        target = path / shard["file"]
        if target.exists():
            target.unlink()
            report.removed.append(shard["file"])
    redo = set(batch["question_ids"])
    manifest["status"][depth] = [q for q in manifest["status"].get(depth, []) if q not in redo]
    manifest["batches"][depth] = [b for b in manifest["batches"][depth] if b["batch"] != batch["batch"]]
    report.redo.setdefault(int(depth), []).extend(batch["question_ids"])


def _remove_strays(path: Path, manifest: dict[str, Any], report: ResumeReport) -> None:
    listed = mf.listed_files(manifest)
    for root, _dirs, files in os.walk(path):
        for name in files:
            full = Path(root) / name
            rel = full.relative_to(path).as_posix()
            stray_shard = rel.split("/", 1)[0] in sch.KINDS and name.endswith(".parquet") and rel not in listed
            if is_temp_name(name) or stray_shard:
                full.unlink()
                report.removed.append(rel)


def _filter_generations(path: Path, manifest: dict[str, Any], report: ResumeReport) -> None:
    """Drop generation and episode rows of incomplete questions (written before a kill, manifest not yet
    updated), and redo batches whose rows are gone (a table deleted after a CorruptRunError). Batches are dropped
    first, for both tables, so that no table keeps rows of a batch the other one's check dropped.

    A table that fails verification (sha256, pages or footer) is rebuilt from the rows that verify
    (:func:`~sst_interp.store.salvage.salvage_table`), under a footer made afresh; the batches whose rows it lost
    are recorded again. One with nothing to salvage (no footer, or schema copies that disagree) is removed, and every
    batch it held is recorded again. Its damaged bytes are never written back (docs/format.md)."""
    loaded = {}
    rewrite = set()
    for name, flag in ((GENERATIONS_NAME, "generations"), (EPISODES_NAME, "episodes")):
        target = path / name
        table = None
        if target.exists():
            if table_intact(target, manifest.get("tables", {}).get(name)):
                table = integrity.read_table(target)
            else:
                report.damaged.append(name)
                table = salvage.salvage_table(target, name)
                if table is None:
                    target.unlink()
                    record_table(manifest, name, None)
                else:
                    report.rebuilt.append(name)
                    rewrite.add(name)
        loaded[name] = table
        present = set() if table is None else {
            (q, int(d)) for q, d in zip(table.column("question_id").to_pylist(), table.column("depth").to_pylist())}
        for depth, batches in manifest.get("batches", {}).items():
            for batch in list(batches):
                if batch.get(flag) and any((q, int(depth)) not in present for q in batch["question_ids"]):
                    _drop_batch(path, manifest, depth, batch, report)
    done = mf.completed_pairs(manifest)
    for name, table in loaded.items():
        if table is None:
            continue
        # a row repeating an earlier one's key (a question recorded twice before reconcile dropped the copy)
        # goes; the earlier row belongs to the batch that was kept
        keys = [c for c in ("question_id", "depth", "turn") if c in table.schema.names]
        seen: set[tuple[Any, ...]] = set()
        keep = []
        for row in zip(*(table.column(c).to_pylist() for c in keys)):
            keep.append((row[0], int(row[1])) in done and row not in seen)
            seen.add(row)
        if not all(keep) or name in rewrite:
            kept = salvage.fresh(table.filter(pa.array(keep, type=pa.bool_())), manifest)
            written = tables.write_table_atomic(kept, path / name, row_groups=salvage.batch_row_groups(kept, manifest))
            record_table(manifest, name, written)
