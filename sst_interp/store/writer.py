"""RunWriter: create or resume a run directory and write question batches from a background thread.

Commit order for one batch (so a kill at any point loses no completed question and leaves no duplicate):
shards are written to temporary names and renamed, then ``generations.parquet`` is rewritten (temp + rename),
then ``manifest.json`` is rewritten atomically, marking the batch's questions complete. On resume
(:mod:`sst_interp.store.resume`), temporary files, shards the manifest does not list and generation rows of
incomplete questions are removed.

Integrity: every file is written with a CRC per Parquet page, and its sha256 (hashed as it is written) goes into
the manifest. Resume checks every listed shard's sha256 and re-records the batches whose shards fail; a damaged
generations or episodes table keeps its readable row groups (one per batch) and the batches whose rows were
lost are re-recorded.

Several processes (``torchrun``): rank 0 opens the run with :meth:`RunWriter.create_or_resume` (which takes the
run's lock and does the resume clean-up), the other ranks then :meth:`RunWriter.join` it. Each rank writes its own
shards, under batch ids no other rank uses (``first + rank + world_size * i``), and commits a batch (its table rows
and its manifest entry) while holding ``.commit.lock``, re-reading the manifest on disk first, so that no commit
overwrites another rank's.

Compression: each shard kind gets the codec of :data:`sst_interp.store.codecs.SHARD_CODECS` (chosen by
``bench/bench_storage.py``); the small tables (questions, generations, episodes) are zstd.
"""

from __future__ import annotations

import errno
import queue
import shutil
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import filelock
import pandas as pd
import pyarrow as pa

from sst_interp import __version__
from sst_interp.kernels.errors import UsageError
from sst_interp.store import manifest as mf
from sst_interp.store import schema as sch
from sst_interp.store import codecs, integrity, salvage, stamp, tables
from sst_interp.store.atomic import is_temp_name
from sst_interp.store.errors import CorruptRunError
from sst_interp.store.manifest import EPISODES_NAME, GENERATIONS_NAME, QUESTIONS_NAME, RESERVED_KEYS, record_table
from sst_interp.store.resume import (
    ResumeReport,
    manifest_lost,
    rebuild_if_lost,
    resume_run,
    table_intact,
    validated_manifest,
)


LOCK_NAME = ".lock"


COMMIT_LOCK_NAME = ".commit.lock"


@dataclass
class _Job:
    depth: int
    question_ids: list[str]
    generations: Any
    shards: dict[str, Any]
    episodes: Any = None
    meta: dict[str, Any] | None = None


class RunWriter:
    """Writes a run directory; use :meth:`create_or_resume` and the context manager (closes and joins)."""

    def __init__(self, path: Path, manifest: dict[str, Any], lock_handle: Any, report: ResumeReport,
                 queue_size: int = 2, rank: int = 0, world_size: int = 1) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside a world of {world_size} processes")
        self.path = path
        self.rank, self.world_size = rank, world_size
        self.report = report
        self._manifest = manifest
        self._lock_handle = lock_handle
        self._queue: queue.Queue[_Job | None] = queue.Queue(maxsize=max(1, queue_size))
        self._error: BaseException | None = None
        self._pending: dict[int, set[str]] = {}
        self._state_lock = threading.Lock()
        # held from copying the manifest to installing the rewritten one, so the writer thread's batch commits
        # and write_questions' table record never overwrite each other's changes
        self._commit_lock = threading.Lock()
        self._closed = False
        self.bytes_written = 0
        first_batch = max(int(manifest.get("next_batch", 1)), 1 + max(
            (b["batch"] for batches in manifest.get("batches", {}).values() for b in batches), default=0
        ))
        # Every rank reads the same manifest before any of them commits, so first_batch is the same everywhere and
        # the ids below never collide between ranks.
        self._next_batch = first_batch + rank
        # Across processes: held (with _commit_lock) from re-reading the manifest to installing the rewritten one.
        self._shared_lock = (filelock.FileLock(path / COMMIT_LOCK_NAME, thread_local=False) if world_size > 1
                             else None)
        self._thread = threading.Thread(target=self._worker, name="sst-run-writer", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------------------------------ open
    @classmethod
    def create_or_resume(cls, path: str | Path, identity: dict[str, Any], manifest_extra: dict[str, Any],
                         queue_size: int = 2, world_size: int = 1) -> RunWriter:
        """Create a run at ``path`` or continue the run already there.

        ``identity`` must equal the existing run's (else UsageError: pick another --out). ``manifest_extra``
        supplies ``hidden_size``, ``num_layers``, ``dtype`` and the other manifest keys; the layout keys
        (hidden_size, num_layers, dtype, top_k, sketch_k) must also match on resume. A directory holding
        something that is not a run is refused. With ``world_size`` > 1 this is rank 0 of a multi-process
        recording, and ranks 1.. :meth:`join` the run once this returns.
        """
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise UsageError(f"--out {path} is a file, not a run directory; pick another --out")
        path.mkdir(parents=True, exist_ok=True)
        lock_handle = _acquire_lock(path)
        try:
            rebuilt = guard_disk(lambda: rebuild_if_lost(path), path, path / mf.MANIFEST_NAME)
            if (path / mf.MANIFEST_NAME).exists():
                manifest, report = guard_disk(lambda: resume_run(path, identity, manifest_extra), path, path)
                report.reconciled[:0] = rebuilt
            else:
                manifest, report = guard_disk(lambda: _create(path, identity, manifest_extra), path,
                                              path / mf.MANIFEST_NAME)
        except BaseException:
            lock_handle.close()
            raise
        return cls(path, manifest, lock_handle, report, queue_size=queue_size, world_size=world_size)

    @classmethod
    def join(cls, path: str | Path, identity: dict[str, Any], manifest_extra: dict[str, Any], rank: int,
             world_size: int, queue_size: int = 2) -> RunWriter:
        """Write into the run rank 0 has opened with :meth:`create_or_resume` (``world_size`` given there too).

        The caller makes sure rank 0 has finished opening first (a barrier) and that no rank commits before every
        rank has joined (a second barrier), so that all ranks start from the same manifest. The identity and the
        layout keys must match, as on resume.
        """
        path = Path(path)
        if rank < 1:
            raise ValueError("rank 0 opens the run with create_or_resume; join is for ranks 1 and above")
        manifest = validated_manifest(path, identity, manifest_extra)
        return cls(path, mf.normalise(manifest), None, ResumeReport(resumed=True), queue_size=queue_size, rank=rank,
                   world_size=world_size)

    # ------------------------------------------------------------------------------------------ API
    @property
    def manifest(self) -> dict[str, Any]:
        """A copy of the manifest as last committed."""
        with self._state_lock:
            return mf.normalise(self._manifest)

    def completed(self, depth: int) -> set[str]:
        """Question ids complete at ``depth`` (committed in the manifest)."""
        with self._state_lock:
            return set(self._manifest["status"].get(str(int(depth)), []))

    def write_questions(self, frame: pd.DataFrame) -> None:
        """Write ``questions.parquet`` (contract columns). On resume new questions are appended; a question id
        already present with different content is a UsageError (the data changed under the same run)."""
        missing = [f.name for f in sch.QUESTIONS_SCHEMA if f.name not in frame.columns]
        if missing:
            raise ValueError(f"questions frame misses columns {missing}")
        if frame["question_id"].duplicated().any():
            raise ValueError("question ids must be unique")
        table = pa.Table.from_pandas(frame[sch.QUESTIONS_SCHEMA.names], schema=sch.QUESTIONS_SCHEMA,
                                     preserve_index=False)
        target = self.path / QUESTIONS_NAME
        if target.exists():
            old = self._verified_table(QUESTIONS_NAME)
            old_rows = {row["question_id"]: row for row in old.to_pylist()}
            new_rows = []
            for row in table.to_pylist():
                previous = old_rows.get(row["question_id"])
                if previous is None:
                    new_rows.append(row)
                elif previous != row:
                    raise UsageError(f"question {row['question_id']!r} differs from the one recorded in {self.path}; "
                                     "pick another --out for different data")
            if not new_rows:
                return
            table = pa.concat_tables([old, pa.Table.from_pylist(new_rows, schema=sch.QUESTIONS_SCHEMA)])
        table = salvage.fresh(table, self._manifest)
        with self._commit_lock, self._across_processes():
            written = self._guard_disk(lambda: tables.write_table_atomic(table, target), target)
            with self._state_lock:
                new_manifest = mf.normalise(self._manifest)
            record_table(new_manifest, QUESTIONS_NAME, written)
            self._commit(new_manifest)

    def submit(self, depth: int, question_ids: Sequence[str], generations: Any = None, hidden: Any = None,
               logits: Any = None, sketch: Any = None, gates: Any = None, episodes: Any = None,
               meta: dict[str, Any] | None = None, attention: Any = None) -> None:
        """Queue one batch for writing; it is committed (and ``completed(depth)`` includes it) once written.

        ``episodes`` (CodeACT runs): one row per question of the batch, for ``episodes.parquet``. ``meta``: JSON
        keys kept in the batch's manifest entry (an intervened run's site counts), dropped with the batch.

        Column dicts as in :mod:`sst_interp.store.tables` (numpy arrays or torch tensors, one entry per row).
        Blocks while the queue is full. Raises the writer thread's error, if any, and ValueError when a
        question is already complete or queued at this depth.
        """
        self._raise_error()
        if self._closed:
            raise ValueError("submit on a closed RunWriter")
        depth = int(depth)
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        ids = [str(q) for q in question_ids]
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate question ids in one batch")
        with self._state_lock:
            taken = set(self._manifest["status"].get(str(depth), [])) | self._pending.get(depth, set())
            again = sorted(taken & set(ids))
            if again:
                raise ValueError(f"questions already recorded at depth {depth}: {again[:5]}")
            self._pending.setdefault(depth, set()).update(ids)
        shards = {k: v for k, v in (("hidden", hidden), ("logits", logits), ("sketch", sketch), ("gates", gates),
                                    ("attention", attention)) if v is not None}
        job = _Job(depth, ids, generations, shards, episodes, dict(meta) if meta else None)
        while True:
            try:
                self._queue.put(job, timeout=0.2)
                return
            except queue.Full:
                self._raise_error()

    def flush(self) -> None:
        """Wait until every submitted batch is committed; raises the writer thread's error, if any."""
        while self._thread.is_alive() and self._queue.unfinished_tasks:
            with self._queue.all_tasks_done:
                self._queue.all_tasks_done.wait(timeout=0.2)
        self._raise_error()

    def close(self) -> None:
        """Finish the queued batches, stop the thread, release the lock; raises the thread's error, if any."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join()
            if self._lock_handle is not None:
                self._lock_handle.close()
        self._raise_error()

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except BaseException as writer_error:  # the body's exception wins; the writer's is attached to it
            if writer_error is not exc:
                exc.add_note(f"the run writer also failed: {writer_error!r}")

    # ------------------------------------------------------------------------------------------ thread
    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _worker(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                if self._error is None:
                    self._write_batch(job)
            except BaseException as err:  # handed to the caller on the next submit/flush/close
                self._error = err
            finally:
                self._queue.task_done()

    def _write_batch(self, job: _Job) -> None:
        batch_id = self._next_batch
        self._next_batch += self.world_size
        layout = self._manifest
        entry: dict[str, Any] = {"batch": batch_id, "question_ids": job.question_ids, "shards": {},
                                 "generations": job.generations is not None, "episodes": job.episodes is not None}
        if job.meta:
            entry.update({k: v for k, v in job.meta.items() if k not in entry})
        for kind, columns in job.shards.items():
            table, present = tables.build_shard_table(kind, columns, job.question_ids, layout)
            if table.num_rows == 0:
                continue
            table = stamp.stamped(table, layout)  # so a lost manifest can be rebuilt from the shards
            rel = f"{kind}/depth={job.depth}/part-{batch_id:06d}.parquet"
            codec = codecs.shard_codec(kind, layout.get("dtype"))
            final = self.path / rel
            written = self._guard_disk(lambda: tables.write_shard(table, present, final, codec), final)
            self.bytes_written += written.bytes
            entry["shards"][kind] = {"file": rel, "bytes": written.bytes, "rows": table.num_rows,
                                     "question_ids": present, "sha256": written.sha256}
        new_rows = {}
        if job.generations is not None:
            new_rows[GENERATIONS_NAME] = tables.generations_table(job.generations, job.depth, job.question_ids)
        if job.episodes is not None:
            new_rows[EPISODES_NAME] = tables.episodes_table(job.episodes, job.depth, job.question_ids)
        with self._commit_lock, self._across_processes():
            appended = {name: self._append_rows(name, rows) for name, rows in new_rows.items()}
            self._commit_batch(job, batch_id, entry, appended)

    @contextmanager
    def _across_processes(self) -> Iterator[None]:
        """Hold ``.commit.lock`` and take up the manifest on disk (other ranks' commits) in a multi-process run;
        nothing in a single-process one, where this writer's manifest is the only one."""
        if self._shared_lock is None:
            yield
            return
        with self._shared_lock:
            on_disk = mf.normalise(mf.read_manifest(self.path))
            with self._state_lock:
                self._manifest = on_disk
            yield

    def _append_rows(self, name: str, rows: pa.Table) -> integrity.Written:
        """Rewrite table ``name`` with ``rows`` appended as a row group of their own (the old rows only once the
        file verifies against the manifest, under a footer made afresh: docs/format.md, "Damage is never
        blessed")."""
        target = self.path / name
        groups = [rows.num_rows]
        if target.exists():
            handle = integrity.open_parquet(target)
            old = self._verified_table(name)
            groups = [handle.metadata.row_group(i).num_rows for i in range(handle.metadata.num_row_groups)] + groups
            rows = pa.concat_tables([old, rows.replace_schema_metadata(None)], promote_options="permissive")
        rows = salvage.fresh(rows, self._manifest)
        return self._guard_disk(lambda: tables.write_table_atomic(rows, target, row_groups=groups), target)

    def _verified_table(self, name: str) -> pa.Table:
        """Table ``name`` as the manifest records it, read to be rewritten; CorruptRunError naming it when its bytes
        changed since they were recorded (damage during this recording: never rewritten and hashed again)."""
        target = self.path / name
        with self._state_lock:
            recorded = self._manifest.get("tables", {}).get(name)
        if not table_intact(target, recorded):
            raise CorruptRunError(f"{target} changed after this recording verified it (its sha256, pages or footer "
                                  f"fail their checks); it is left as it is: {integrity.repair_advice(target)}")
        return integrity.read_table(target).replace_schema_metadata(None)

    def _commit_batch(self, job: _Job, batch_id: int, entry: dict[str, Any],
                      appended: dict[str, integrity.Written]) -> None:
        """Mark the batch complete in a rewritten manifest (the caller holds the commit lock)."""
        with self._state_lock:
            new_manifest = mf.normalise(self._manifest)
        for name, written in appended.items():
            record_table(new_manifest, name, written)
        key = str(job.depth)
        new_manifest["batches"].setdefault(key, []).append(entry)
        new_manifest["status"].setdefault(key, []).extend(job.question_ids)
        # shard names are never reused, even after a dropped batch (other ranks may have committed higher ids)
        new_manifest["next_batch"] = max(int(new_manifest.get("next_batch", 1)), batch_id + 1)
        if job.depth not in new_manifest.get("depths", []):
            new_manifest["depths"] = sorted(set(new_manifest.get("depths", [])) | {job.depth})
        self._commit(new_manifest)
        with self._state_lock:
            self._pending[job.depth].difference_update(job.question_ids)

    def _commit(self, new_manifest: dict[str, Any]) -> None:
        """Write ``new_manifest`` atomically and make it the current one (the caller holds the commit lock)."""
        self._guard_disk(lambda: mf.write_json_atomic(self.path / mf.MANIFEST_NAME, new_manifest),
                         self.path / mf.MANIFEST_NAME)
        with self._state_lock:
            self._manifest = new_manifest

    def _guard_disk(self, action: Any, target: Path) -> Any:
        return guard_disk(action, self.path, target)


def guard_disk(action: Any, run_path: Path, target: Path) -> Any:
    """Run ``action`` (which writes ``target``); a full disk becomes a one-line UsageError."""
    try:
        return action()
    except OSError as err:
        if err.errno == errno.ENOSPC or "No space left" in str(err):
            free = shutil.disk_usage(run_path).free
            raise UsageError(
                f"disk full while writing {target} ({free / 1e6:.1f} MB free); free some space and rerun the "
                "same command to resume (completed questions are kept)"
            ) from err
        raise


# ---------------------------------------------------------------------------------------------- helpers
class _HeldLock:
    """The run directory's lock while a writer holds it; :meth:`close` releases it."""

    def __init__(self, lock: filelock.FileLock) -> None:
        self._lock = lock

    def close(self) -> None:
        """Release the lock."""
        self._lock.release()


def _acquire_lock(path: Path) -> _HeldLock:
    """Take ``<path>/.lock`` without waiting; a second writer on the same run is a one-line UsageError.

    filelock locks with flock on POSIX and msvcrt on Windows. ``thread_local=False`` so that the release works
    whichever thread closes the writer; ``timeout=0`` because waiting for another recording to finish would look
    like a hang.
    """
    lock = filelock.FileLock(path / LOCK_NAME, timeout=0, thread_local=False)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise UsageError(f"another process is recording into {path}; wait for it or pick another --out") from None
    return _HeldLock(lock)


def _base_manifest(identity: dict[str, Any], manifest_extra: dict[str, Any]) -> dict[str, Any]:
    clash = [k for k in RESERVED_KEYS if k in manifest_extra]
    if clash:
        raise ValueError(f"manifest_extra may not set {clash}")
    if "dtype" in manifest_extra:
        sch.check_dtype(str(manifest_extra["dtype"]))
    manifest = {"schema_version": sch.SCHEMA_VERSION, "identity": identity, "package_version": __version__}
    manifest.update(manifest_extra)
    manifest.setdefault("depths", [])
    manifest["depths"] = sorted({int(d) for d in manifest["depths"]})
    manifest.setdefault("protocol", "completion")  # a required field of docs/format.md; episodes set codeact
    manifest["status"] = {}
    manifest["batches"] = {}
    manifest["tables"] = {}
    return mf.normalise(manifest)


def _create(path: Path, identity: dict[str, Any], extra: dict[str, Any]) -> tuple[dict[str, Any], ResumeReport]:
    report = ResumeReport()
    for entry in path.iterdir():
        if entry.name in (LOCK_NAME, COMMIT_LOCK_NAME):
            continue
        if entry.is_file() and is_temp_name(entry.name):
            entry.unlink()
            report.removed.append(entry.name)
            continue
        raise UsageError(f"--out {path} already holds files that are not an sst-interp run (e.g. {entry.name}); "
                         "pick another --out or empty it")
    manifest = _base_manifest(identity, extra)
    mf.write_json_atomic(path / mf.MANIFEST_NAME, manifest)
    return manifest, report


def check_out(path: str | Path, identity: dict[str, Any], manifest_extra: dict[str, Any] | None = None,
              later: tuple[str, ...] = ()) -> bool:
    """Check, without touching anything, that ``path`` can take this run: absent, empty, or a run with the same
    identity (and layout keys, when given). Returns True when a run is there to resume; raises UsageError as
    :meth:`RunWriter.create_or_resume` would. ``later``: identity keys left out of this comparison because the caller
    does not know them yet (``record`` checks the numerics fingerprint once the model is loaded);
    :meth:`RunWriter.create_or_resume` compares them."""
    path = Path(path)
    if not path.exists():
        return False
    if not path.is_dir():
        raise UsageError(f"--out {path} is a file, not a run directory; pick another --out")
    if manifest_lost(path):
        return True  # create_or_resume rebuilds it from the files, then checks the identity it finds
    if not (path / mf.MANIFEST_NAME).exists():
        for entry in path.iterdir():
            if entry.name not in (LOCK_NAME, COMMIT_LOCK_NAME) and not (entry.is_file() and is_temp_name(entry.name)):
                raise UsageError(f"--out {path} already holds files that are not an sst-interp run (e.g. "
                                 f"{entry.name}); pick another --out or empty it")
        return False
    validated_manifest(path, identity, manifest_extra or {}, later=later)
    return True
