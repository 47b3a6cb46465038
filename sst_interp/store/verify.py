"""Full verification of a run directory: every shard and table read page by page with CRC checks, hashed and
compared with the sha256 the writer recorded, checked against the column contract and the writer's index; then
the run's consistency (:mod:`sst_interp.store.consistency`): the manifest agrees with the shards and tables, and
every recorded block occurs once.

Unlike :meth:`sst_interp.store.Run.open` (footers only) this reads every byte of the run, once to hash and once
to decode: about the cost of reading the run twice from disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sst_interp.kernels.errors import UsageError
from sst_interp.store import consistency, contract, discovery, integrity
from sst_interp.store import manifest as mf
from sst_interp.store.consistency import Finding
from sst_interp.store.discovery import ShardFile
from sst_interp.store.errors import CorruptRunError
from sst_interp.store.rebuild import has_run_files
from sst_interp.store.validate import check_shard, read_footer


@dataclass
class VerifyReport:
    """What :func:`verify_run` found.

    Args:
        checked: relative paths of the files read in full.
        damaged: (relative path, reason) of every file that failed a check.
        unhashed: files with no sha256 in the manifest (written by another tool or before checksums): only their
            pages and footers could be checked.
        strays: shards the writer's index does not list (left by an interrupted batch; resume removes them).
        inconsistent: what disagrees between files that are each intact (the manifest and the shards or tables,
            or a block recorded twice), each naming the file at fault.
        bytes: total size of the checked files.
    """

    checked: list[str] = field(default_factory=list)
    damaged: list[tuple[str, str]] = field(default_factory=list)
    unhashed: list[str] = field(default_factory=list)
    strays: list[str] = field(default_factory=list)
    inconsistent: list[Finding] = field(default_factory=list)
    bytes: int = 0

    @property
    def ok(self) -> bool:
        """True when no file is damaged and the files agree."""
        return not self.damaged and not self.inconsistent


def verify_run(path: str | Path) -> VerifyReport:
    """Verify every file of the run at ``path``; UsageError when ``path`` is not a run directory."""
    path = Path(path)
    if not path.is_dir():
        raise UsageError(f"{path} is not a directory; pass a run directory (the --out of a record run)")
    target = path / mf.MANIFEST_NAME
    report = VerifyReport()
    manifest: dict[str, Any] | None = None
    if not target.is_file():
        if not has_run_files(path):
            raise UsageError(f"{path} is not a run directory (no {mf.MANIFEST_NAME}); pass the --out of a record "
                             "run")
        # the shards and tables are still checked, as for an unreadable manifest: the report covers every file
        report.damaged.append((mf.MANIFEST_NAME, "missing, while the run's shards and tables are there"))
    else:
        try:
            manifest = contract.check_manifest(target, mf.read_manifest(path))
        except ValueError as err:  # invalid JSON is damage; a valid manifest of something else is a UsageError
            if isinstance(err, UsageError):
                raise
            report.damaged.append((mf.MANIFEST_NAME, f"not valid JSON ({err})"))
    listed = mf.listed_shards(manifest or {})
    writer_run = manifest is not None and "batches" in manifest
    found = list(discovery.shard_paths(path))
    footers = {rel: meta for _kind, _depth, rel in found if (meta := _footer(path / rel)) is not None}
    shards = [ShardFile(kind, depth, rel, footers[rel]) for kind, depth, rel in found if rel in footers]
    layout = manifest
    if manifest is not None:
        report.inconsistent, layout = consistency.layout_findings(manifest, shards)
    for kind, _depth, rel in found:
        entry = listed.pop(rel, None)
        if writer_run and entry is None:
            report.strays.append(rel)
        _check(path, rel, report, entry, lambda meta, k=kind, r=rel: layout is None or contract.check_shard_schema(
            path / r, k, meta.schema.to_arrow_schema(), layout))
    for rel in sorted(listed):
        report.damaged.append((rel, "listed in the manifest but missing"))
    tables = (manifest or {}).get("tables", {})
    for name in discovery.TABLE_NAMES:
        if (path / name).exists():
            _check(path, name, report, tables.get(name), lambda meta, n=name: contract.check_columns(
                path / n, meta.schema.to_arrow_schema(), contract.TABLE_COLUMNS[n]))
        elif name in tables:
            report.damaged.append((name, "recorded in the manifest but missing"))
    if manifest is not None:
        damaged = {rel for rel, _ in report.damaged}
        intact = [s for s in shards if s.rel not in damaged]  # damage is reported once, as damage
        report.inconsistent += consistency.status_findings(manifest, shards)
        report.inconsistent += [f for f in consistency.table_presence_findings(path, manifest)
                                if f.file not in tables]  # a recorded table that is gone is damage, listed above
        report.inconsistent += consistency.duplicate_blocks(path, intact, full=True)
        report.inconsistent += [f for f in consistency.table_findings(path, manifest) if f.file not in damaged]
    return report


def _footer(target: Path) -> Any:
    """A shard's footer, or None when it cannot be read (the file's own checks report it)."""
    try:
        return read_footer(target)
    except CorruptRunError:
        return None


def _check(run_path: Path, rel: str, report: VerifyReport, recorded: dict[str, Any] | None, schema_check: Any) -> None:
    """Run every check of one file, recording each failure (one file may fail several)."""
    target = run_path / rel
    report.checked.append(rel)
    report.bytes += target.stat().st_size
    problems = []
    try:
        meta = check_shard(run_path, recorded) if recorded is not None and "rows" in recorded else read_footer(target)
        schema_check(meta)
    except CorruptRunError as err:
        problems.append(_reason(err, target))
    if recorded is not None and "sha256" in recorded:
        if integrity.sha256_file(target) != recorded["sha256"]:
            problems.append("sha256 differs from the one recorded in the manifest")
    else:
        report.unhashed.append(rel)
    try:
        integrity.scan_pages(target)
    except CorruptRunError as err:
        problems.append(_reason(err, target))
    if problems:
        report.damaged.append((rel, "; ".join(dict.fromkeys(problems))))


def _reason(err: CorruptRunError, target: Path) -> str:
    """The error's message without the file name and the repair advice (the report names both once)."""
    text = " ".join(str(err).split()).replace(f"shard {target} ", "").replace(f"{target} ", "")
    text = text.split("; ")[0]
    if text.startswith("is damaged (its footer"):  # salvage.footer_problem: not a page
        return text.removeprefix("is damaged (").removesuffix(")")
    return f"pages fail their checks ({text.removeprefix('is damaged (')}" if text.startswith("is damaged") else text
