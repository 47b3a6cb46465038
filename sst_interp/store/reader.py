"""Run: the streaming reader of a run directory (one (question, turn) block at a time)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sst_interp.kernels.errors import UsageError
from sst_interp.store import manifest as mf
from sst_interp.store import schema as sch
from sst_interp.store import consistency, contract, discovery, integrity
from sst_interp.store.discovery import QuestionIndex, ShardFile
from sst_interp.store.errors import CorruptRunError
from sst_interp.store.rebuild import has_run_files
from sst_interp.store.validate import check_shard, check_table_file, read_footer


@dataclass(frozen=True)
class HiddenBlock:
    """Full hidden states of one (question, turn) at one depth.

    Args:
        question_id: the question.
        turn: 0-based turn.
        positions: [P] int64, generated positions, ascending.
        iterations: [I] int64, 1-based.
        layers: [L] int64, 0-based.
        values: [P, I, L, d] float32 (bfloat16 widened exactly); NaN where a (position, iteration, layer)
            was not recorded (only when the grid is ragged, e.g. under a probe depth policy).
    """

    question_id: str
    turn: int
    positions: np.ndarray
    iterations: np.ndarray
    layers: np.ndarray
    values: np.ndarray


BF16_NAN = 0x7FC0  # the bfloat16 bits that widen to float32 NaN (0x7FC00000), as np.float32(np.nan)


@dataclass(frozen=True)
class RawHiddenBlock:
    """Hidden states of one (question, turn) at one depth as stored, not yet widened (:meth:`Run.hidden_raw`).

    Analyses that need one iteration, one layer or only magnitudes widen just that part; every method returns
    exactly the numbers of the matching slice of :attr:`HiddenBlock.values`.

    Args:
        question_id, turn, positions, iterations, layers: as in :class:`HiddenBlock`.
        raw: [P, I, L, d]: uint16 bfloat16 bit patterns (``dtype`` "bfloat16") or float32 values ("float32");
            cells with no row hold NaN (bits ``BF16_NAN`` for bfloat16). Often a read-only view of the decoded
            column (no copy is made when the rows already fill the grid in order).
        dtype: the run's hidden dtype.
        complete: every (position, iteration, layer) cell has a row (no NaN fill): then any positions / layers
            subset of this block is exactly the block a filtered :meth:`Run.hidden` read returns.
    """

    question_id: str
    turn: int
    positions: np.ndarray
    iterations: np.ndarray
    layers: np.ndarray
    raw: np.ndarray
    dtype: str
    complete: bool

    def values(self, key: Any = ...) -> np.ndarray:
        """float32 ``HiddenBlock.values[key]`` (bfloat16 widened exactly), widening only ``raw[key]``."""
        part = self.raw[key]
        if self.dtype == "float32":
            return np.array(part, dtype=np.float32)
        return sch.bf16_bits_to_float32(part)

    def magnitudes(self, key: Any = ...) -> np.ndarray:
        """float32 ``np.abs(HiddenBlock.values[key])``, bit for bit (for bfloat16 the sign bit is cleared before
        widening, which is what ``np.abs`` does to the widened value, NaN included)."""
        part = self.raw[key]
        if self.dtype == "float32":
            return np.abs(part)
        wide = np.left_shift(part, 16, dtype=np.uint32)  # the widened bits ...
        wide &= np.uint32(0x7FFF0000)  # ... with the sign cleared
        return wide.view(np.float32)


@dataclass(frozen=True)
class LogitBlock:
    """Per-iteration output distributions of one (question, turn) at one depth.

    Args:
        positions: [P] int64; iterations: [I] int64 (1-based).
        argmax: [P, I] int32 (-1 where not recorded).
        top_ids: [P, I, K] int32, ids of the top-K log-probs, descending by log-prob.
        top_logprobs: [P, I, K] float32.
        entropy: [P, I] float32 (nats).
        tracked_logprobs: [P, I, K] float32: log-probs at each iteration of that position's iteration-1 top_ids.
    """

    question_id: str
    turn: int
    positions: np.ndarray
    iterations: np.ndarray
    argmax: np.ndarray
    top_ids: np.ndarray
    top_logprobs: np.ndarray
    entropy: np.ndarray
    tracked_logprobs: np.ndarray


@dataclass(frozen=True)
class SketchBlock:
    """Top-k |value| index sketches of one (question, turn) at one depth.

    Args:
        positions: [P] int64; iterations: [I] int64; layers: [L] int64.
        top_indices: [P, I, L, k] int32, indices of the top-k |values| sorted ascending (-1 where not recorded);
            int32 whether the shard stores uint16 (d < 65,536) or int32 indices, widened exactly.
    """

    question_id: str
    turn: int
    positions: np.ndarray
    iterations: np.ndarray
    layers: np.ndarray
    top_indices: np.ndarray


@dataclass(frozen=True)
class GateBlock:
    """FFN gate activity of one (question, turn) at one depth.

    Args:
        positions: [P] int64; iterations: [I] int64; layers: [L] int64.
        active_fraction: [P, I, L] float32, fraction of gate units with positive pre-activation (NaN if absent).
        sign_bits: [P, I, L, n_bytes] uint8 (numpy.packbits of gate > 0), or None when not recorded.
    """

    question_id: str
    turn: int
    positions: np.ndarray
    iterations: np.ndarray
    layers: np.ndarray
    active_fraction: np.ndarray
    sign_bits: np.ndarray | None = None


class Run:
    """A recorded run directory; open with :meth:`Run.open`.

    The run is read from the contract of docs/format.md alone: the required manifest fields, the tables, and
    the shards found in the directory layout. Every page read is CRC-checked (when the file carries checksums,
    as the writer's files do), so damaged values raise a CorruptRunError naming the file instead of being
    returned.
    """

    def __init__(self, path: Path, manifest: dict[str, Any], shards: Sequence[ShardFile] = ()) -> None:
        self.path = path
        self.manifest = manifest
        self._status: dict[int, list[str]] = {int(d): list(ids) for d, ids in manifest["status"].items()}
        self.depths: list[int] = sorted({int(d) for d in manifest.get("depths", [])}
                                        | {d for d, ids in self._status.items() if ids})
        self.hidden_size: int = int(manifest.get("hidden_size", 0))
        self.num_layers: int = int(manifest.get("num_layers", 0))
        self.dtype: str = str(manifest.get("dtype", "float32"))
        self._question_order: list[str] | None = None
        self._shards = list(shards)
        self._indexes: dict[tuple[str, int], QuestionIndex] = {}

    @classmethod
    def open(cls, path: str | Path) -> Run:
        """Open and validate a run.

        Checks the manifest's required fields; finds every shard under ``KIND/depth=D/`` and reads its footer,
        checking the contract columns and types; checks the tables' footers and columns; and, where the writer's
        own index lists a shard, that the file is there with the listed size and row count. Then the footer part
        of the consistency checks (:func:`sst_interp.store.consistency.footer_findings`): the manifest's layout,
        depths and status agree with the shards, the tables a completed run needs are there, and no block is
        recorded twice. No data page is read (but the coordinates of row groups whose footers overlap) and no
        file is hashed here (that is ``python -m sst_interp.store verify``).

        Raises UsageError when ``path`` is not a run, CorruptRunError naming a damaged or off-contract file.
        """
        path = Path(path)
        target = path / mf.MANIFEST_NAME
        repair = f"python -m sst_interp.store repair {path} rebuilds it from the shards and tables"
        if not target.is_file():
            if path.is_dir() and has_run_files(path):
                raise CorruptRunError(f"{target} is missing; {repair}")
            raise UsageError(f"{path} is not a run directory (no {mf.MANIFEST_NAME}); pass the --out of a record run")
        try:
            raw = mf.read_manifest(path)
        except ValueError as err:
            raise CorruptRunError(f"{target} is not valid JSON ({' '.join(str(err).split())}); {repair}") from err
        manifest = contract.check_manifest(target, raw)
        listed = mf.listed_shards(manifest)
        shards = []
        for kind, depth, rel in discovery.shard_paths(path):
            entry = listed.pop(rel, None)
            meta = check_shard(path, entry) if entry is not None else read_footer(path / rel)
            shards.append(ShardFile(kind, depth, rel, meta))
        for rel in sorted(listed):
            check_shard(path, listed[rel])  # listed by the writer but not in the layout: names the missing file
        # the manifest's layout against the footers first, so that a wrong manifest value is blamed on the
        # manifest, not on every shard whose columns it then fails to describe
        _raise_first(path, consistency.layout_findings(manifest, shards)[0])
        for shard in shards:
            contract.check_shard_schema(path / shard.rel, shard.kind, shard.metadata.schema.to_arrow_schema(),
                                        manifest)
        _raise_first(path, consistency.footer_findings(path, manifest, shards))
        for name in discovery.TABLE_NAMES:
            if (path / name).exists():
                meta = check_table_file(path / name)
                contract.check_columns(path / name, meta.schema.to_arrow_schema(), contract.TABLE_COLUMNS[name])
        return cls(path, manifest, shards)

    def check_tables(self) -> Run:
        """Read every page of the run's tables (questions, generations, episodes) with their CRC checks and compare
        each one's sha256 with the one the writer recorded, so that a command reading them refuses a damaged table
        before it writes anything (the tables are small; shards are checked as they are read). Returns the run;
        CorruptRunError names a damaged table and ``store repair``."""
        recorded = self.manifest.get("tables", {})
        for name in discovery.TABLE_NAMES:
            if (self.path / name).exists():
                integrity.scan_pages(self.path / name)
                _check_sha256(self.path / name, recorded.get(name))
        return self

    def check_files(self) -> Run:
        """:meth:`check_tables`, then every listed shard's sha256 against the manifest: what ``store verify``
        checks of each file's bytes, so that a command writing artefacts from the run (``report``) refuses one
        with a damaged byte anywhere, footers included (page CRCs cover only the pages). Costs one read of every
        byte of the run; returns the run; CorruptRunError names the first damaged file and ``store repair``."""
        self.check_tables()
        for rel, entry in sorted(mf.listed_shards(self.manifest).items()):
            _check_sha256(self.path / rel, entry)
        return self

    # ------------------------------------------------------------------------------------------ tables
    def questions(self) -> pd.DataFrame:
        """questions.parquet as a DataFrame (empty with the contract columns when absent)."""
        target = self.path / "questions.parquet"
        if not target.exists():
            return sch.QUESTIONS_SCHEMA.empty_table().to_pandas()
        return integrity.to_frame(integrity.read_table(target), target)

    def generations(self) -> pd.DataFrame:
        """generations.parquet (one row per question, depth, turn), only completed (question, depth) pairs."""
        target = self.path / "generations.parquet"
        if not target.exists():
            return sch.GENERATIONS_SCHEMA.empty_table().to_pandas()
        table = integrity.read_table(target)
        done = mf.completed_pairs(self.manifest)
        keep = [(q, int(d)) in done for q, d in zip(table.column("question_id").to_pylist(),
                                                      table.column("depth").to_pylist())]
        return integrity.to_frame(table.filter(pa.array(keep, type=pa.bool_())), target)

    @property
    def protocol(self) -> str:
        """``completion`` or ``codeact`` (multi-turn episodes; runs from before the field are ``completion``)."""
        return str(self.manifest.get("protocol", "completion"))

    def episodes(self) -> pd.DataFrame:
        """episodes.parquet (one row per CodeACT episode: question, depth), only completed pairs.

        A completion run has no episode table: each generation is then a one-turn episode, and this returns those
        rows in the episodes columns (``n_turns`` 1, ``final_answer`` the extracted answer, ``stop_reason`` the
        generation's), so that grading code reads one table for both protocols.
        """
        target = self.path / "episodes.parquet"
        done = mf.completed_pairs(self.manifest)
        if not target.exists():
            gens = self.generations()
            gens = gens[gens["turn"] == 0]
            frame = pd.DataFrame({
                "question_id": gens["question_id"], "depth": gens["depth"], "n_turns": 1,
                "stop_reason": gens["stop_reason"], "final_answer": gens["extracted_answer"],
                "correct": gens["correct"], "grader": gens["grader"], "depth_policy": gens["depth_policy"],
                "chosen_depth": gens["chosen_depth"]})
            return frame.reset_index(drop=True)
        table = integrity.read_table(target)
        keep = [(q, int(d)) in done for q, d in zip(table.column("question_id").to_pylist(),
                                                      table.column("depth").to_pylist())]
        return integrity.to_frame(table.filter(pa.array(keep, type=pa.bool_())), target)

    def question_ids(self, depth: int | None = None) -> list[str]:
        """Completed question ids at ``depth`` (None: complete at every depth of the run), in questions order."""
        if depth is None:
            sets = [set(self._status.get(d, [])) for d in self.depths]
            done = set.intersection(*sets) if sets else set()
        else:
            done = set(self._status.get(int(depth), []))
        order = self._order()
        ranked = [q for q in order if q in done]
        extra = sorted(done - set(order))
        return ranked + extra

    def _order(self) -> list[str]:
        if self._question_order is None:
            target = self.path / "questions.parquet"
            self._question_order = (integrity.read_table(target, ["question_id"]).column(0).to_pylist()
                                    if target.exists() else [])
        return self._question_order

    # ------------------------------------------------------------------------------------------ streams
    def hidden(self, depth: int, question_ids: Sequence[str] | None = None, turn: int | None = None,
               layers: Sequence[int] | None = None, positions: Sequence[int] | None = None) -> Iterator[HiddenBlock]:
        """Yield one HiddenBlock per (question, turn): values [P, I, L, d] float32."""
        for qid, table in self._tables("hidden", depth, question_ids):
            table = _filter(table, turn=turn, layer=layers, position=positions)
            for t, part in _by_turn(table):
                grid = _Grid(part, ("position", "iteration", "layer"), _where(self.path, "hidden", depth, qid, t))
                values = sch.decode_hidden_values(part.column("values"), self.hidden_size, self.dtype)
                yield HiddenBlock(qid, t, *grid.axes, grid.scatter(values, np.nan, np.float32))

    def hidden_raw(self, depth: int, question_ids: Sequence[str] | None = None, turn: int | None = None,
                   layers: Sequence[int] | None = None, positions: Sequence[int] | None = None
                   ) -> Iterator[RawHiddenBlock]:
        """Like :meth:`hidden`, but yield the values as stored (:class:`RawHiddenBlock`: bfloat16 bit patterns not
        widened), for analyses that widen only the part they use (one iteration, one layer, magnitudes)."""
        for qid, table in self._tables("hidden", depth, question_ids):
            table = _filter(table, turn=turn, layer=layers, position=positions)
            for t, part in _by_turn(table):
                grid = _Grid(part, ("position", "iteration", "layer"), _where(self.path, "hidden", depth, qid, t))
                if self.dtype == "float32":
                    rows = sch.decode_hidden_values(part.column("values"), self.hidden_size, self.dtype)
                    raw = grid.arrange(rows, np.nan, np.float32)
                else:
                    rows = _bf16_rows(part.column("values"), self.hidden_size)
                    raw = grid.arrange(rows, BF16_NAN, np.uint16)
                yield RawHiddenBlock(qid, t, *grid.axes, raw, self.dtype, grid.complete)

    def logits(self, depth: int, question_ids: Sequence[str] | None = None,
               turn: int | None = None) -> Iterator[LogitBlock]:
        """Yield one LogitBlock per (question, turn): arrays [P, I] and [P, I, K]."""
        for qid, table in self._tables("logits", depth, question_ids):
            table = _filter(table, turn=turn)
            for t, part in _by_turn(table):
                grid = _Grid(part, ("position", "iteration"), _where(self.path, "logits", depth, qid, t))
                col = part.column
                yield LogitBlock(
                    qid, t, *grid.axes,
                    argmax=grid.scatter(col("argmax").to_numpy(), -1, np.int32),
                    top_ids=grid.scatter(sch.decode_fixed_list(col("top_ids"), np.int32), -1, np.int32),
                    top_logprobs=grid.scatter(sch.decode_fixed_list(col("top_logprobs"), np.float32), np.nan,
                                              np.float32),
                    entropy=grid.scatter(col("entropy").to_numpy(), np.nan, np.float32),
                    tracked_logprobs=grid.scatter(sch.decode_fixed_list(col("tracked_logprobs"), np.float32),
                                                  np.nan, np.float32),
                )

    def sketch(self, depth: int, question_ids: Sequence[str] | None = None,
               turn: int | None = None) -> Iterator[SketchBlock]:
        """Yield one SketchBlock per (question, turn): top_indices [P, I, L, k] int32 (uint16 shards widened)."""
        for qid, table in self._tables("sketch", depth, question_ids):
            table = _filter(table, turn=turn)
            for t, part in _by_turn(table):
                grid = _Grid(part, ("position", "iteration", "layer"), _where(self.path, "sketch", depth, qid, t))
                top = sch.decode_fixed_list(part.column("top_indices"), np.int32)
                yield SketchBlock(qid, t, *grid.axes, grid.scatter(top, -1, np.int32))

    def gates(self, depth: int, question_ids: Sequence[str] | None = None,
              turn: int | None = None) -> Iterator[GateBlock]:
        """Yield one GateBlock per (question, turn): active_fraction [P, I, L] float32."""
        for qid, table in self._tables("gates", depth, question_ids):
            table = _filter(table, turn=turn)
            for t, part in _by_turn(table):
                grid = _Grid(part, ("position", "iteration", "layer"), _where(self.path, "gates", depth, qid, t))
                frac = grid.scatter(part.column("active_fraction").to_numpy(), np.nan, np.float32)
                bits = None
                if "sign_bits" in part.schema.names:
                    rows = part.column("sign_bits").to_pylist()
                    width = max((len(r) for r in rows), default=0)
                    packed = np.array([np.frombuffer(r.ljust(width, b"\0"), dtype=np.uint8) for r in rows],
                                      dtype=np.uint8).reshape(len(rows), width)
                    bits = grid.scatter(packed, 0, np.uint8)
                yield GateBlock(qid, t, *grid.axes, frac, bits)

    def _tables(self, kind: str, depth: int, question_ids: Sequence[str] | None) -> Iterator[tuple[str, pa.Table]]:
        """Yield (question id, that question's rows of ``kind`` at ``depth``), reading only the row groups that hold
        it (one, for the writer's shards)."""
        depth = int(depth)
        done = self.question_ids(depth)
        if question_ids is None:
            wanted = done
        else:
            wanted = [str(q) for q in question_ids]
            missing = sorted(set(wanted) - set(done))
            if missing:
                raise UsageError(f"questions {missing[:5]} are not recorded at depth {depth} in {self.path}; "
                                 f"see run.question_ids({depth})")
        index = self._index(kind, depth)
        reader = _GroupReader(self.path, {s.rel: s.metadata for s in self._shards})
        for qid in wanted:
            places = index.places.get(qid)
            if not places:
                continue  # the question has no rows of this kind (e.g. no sketch positions generated)
            parts = [reader.rows(rel, group, qid, pinned=(rel, group) in index.pinned) for rel, group in places]
            yield qid, parts[0] if len(parts) == 1 else pa.concat_tables(parts, promote_options="permissive")

    def _index(self, kind: str, depth: int) -> QuestionIndex:
        """Where each question's rows of ``kind`` at ``depth`` are (built on first use from the footers)."""
        key = (kind, int(depth))
        if key not in self._indexes:
            files = [s for s in self._shards if s.kind == kind and s.depth == int(depth)]
            self._indexes[key] = QuestionIndex.build(self.path, files)
        return self._indexes[key]

    def config(self) -> dict[str, Any]:
        """The manifest without the bookkeeping keys (status, batches), for display."""
        return {k: v for k, v in self.manifest.items() if k not in ("status", "batches")}

    def __repr__(self) -> str:
        counts = {d: len(self._status.get(d, [])) for d in self.depths}
        return f"Run({str(self.path)!r}, depths={counts}, d={self.hidden_size}, L={self.num_layers}, {self.dtype})"

    def to_json(self) -> str:
        """The manifest as JSON text."""
        return json.dumps(self.manifest, indent=1)


def _check_sha256(target: Path, recorded: dict[str, Any] | None) -> None:
    """CorruptRunError naming ``target`` when its bytes differ from the sha256 in its manifest entry (files with no
    recorded sha256, from another tool, are checked by their pages only)."""
    if recorded is None or "sha256" not in recorded:
        return
    if integrity.sha256_file(target) != recorded["sha256"]:
        raise CorruptRunError(f"{target} fails verification (its sha256 differs from the one recorded in the "
                              f"manifest); {integrity.repair_advice(target)}")


def _raise_first(path: Path, findings: list[consistency.Finding]) -> None:
    """A CorruptRunError with the first finding (one line), when there is any."""
    if findings:
        more = f" (and {len(findings) - 1} more; python -m sst_interp.store verify {path} lists them)" \
            if len(findings) > 1 else ""
        raise CorruptRunError(findings[0].message(path) + more)


class _GroupReader:
    """Reads row groups with CRC-checked pages, keeping one file open and the last shared row group decoded, so
    questions that share a row group (files written by other tools) do not read it once per question."""

    def __init__(self, run_path: Path, footers: dict[str, pq.FileMetaData]) -> None:
        self._run_path = run_path
        self._footers = footers  # read on open: a file is not parsed twice
        self._file: tuple[str, pq.ParquetFile] | None = None
        self._last: tuple[tuple[str, int], pa.Table] | None = None

    def rows(self, rel: str, group: int, qid: str, pinned: bool) -> pa.Table:
        """The rows of question ``qid`` in row group ``group`` of ``rel``; ``pinned``: its statistics say it holds
        only ``qid``, which is checked, since footers carry no checksum."""
        table = self._group(rel, group)
        ids = table.column("question_id")
        same = pc.equal(ids, pa.scalar(qid, ids.type.value_type if pa.types.is_dictionary(ids.type) else ids.type))
        if pinned:
            if table.num_rows and not pc.all(same).as_py():
                raise CorruptRunError(f"shard {self._run_path / rel} row group {group} does not hold only question "
                                      f"{qid!r}; {integrity.repair_advice(self._run_path / rel)}")
            return table
        return table.filter(same)

    def _group(self, rel: str, group: int) -> pa.Table:
        if self._last is not None and self._last[0] == (rel, group):
            return self._last[1]
        if self._file is None or self._file[0] != rel:
            self._file = (rel, integrity.open_parquet(self._run_path / rel, self._footers.get(rel)))
        table = integrity.read_row_group(self._file[1], self._run_path / rel, group)
        self._last = ((rel, group), table)
        return table


def _bf16_rows(column: pa.Array | pa.ChunkedArray, d: int) -> np.ndarray:
    """The uint16 bit patterns ``[N, d]`` of a bfloat16 ``values`` column, a read-only view of its buffer."""
    if isinstance(column, pa.ChunkedArray):
        column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    n = len(column)
    return np.frombuffer(column.buffers()[1], dtype="<u2", count=n * d, offset=column.offset * 2 * d).reshape(n, d)


def _where(path: Path, kind: str, depth: int, qid: str, turn: int) -> str:
    return f"{path}/{kind}/depth={int(depth)} question {qid!r} turn {turn}"


def _filter(table: pa.Table, **conditions: Any) -> pa.Table:
    mask = np.ones(table.num_rows, dtype=bool)
    for name, wanted in conditions.items():
        if wanted is None:
            continue
        values = table.column(name).to_numpy()
        allowed = np.atleast_1d(np.asarray(wanted, dtype=np.int64))
        mask &= np.isin(values, allowed)
    return table if mask.all() else table.filter(pa.array(mask))


def _by_turn(table: pa.Table) -> Iterator[tuple[int, pa.Table]]:
    if table.num_rows == 0:
        return
    turns = table.column("turn").to_numpy()
    for t in np.unique(turns):
        mask = turns == t
        yield int(t), (table if mask.all() else table.filter(pa.array(mask)))


class _Grid:
    """Scatter rows keyed by coordinate columns into a dense array over the sorted unique coordinates."""

    def __init__(self, table: pa.Table, names: Sequence[str], where: str) -> None:
        coords = [table.column(n).to_numpy().astype(np.int64) for n in names]
        self.axes = [np.unique(c) for c in coords]
        self.index = tuple(np.searchsorted(axis, c) for axis, c in zip(self.axes, coords))
        self.shape = tuple(len(a) for a in self.axes)
        # rows of one question may come from several row groups or files: a coordinate twice means two writes
        # of the same cell (e.g. a copied shard), which would otherwise overwrite each other silently
        flat = np.ravel_multi_index(self.index, self.shape) if table.num_rows else np.zeros(0, np.int64)
        if np.unique(flat).size != flat.size:
            raise CorruptRunError(f"{where} holds the same ({', '.join(names)}) more than once; the run has a "
                                  "duplicated shard or row group: remove the copy")
        # every cell has a row (no fill), and the rows already lie in grid order (the writer's layout)
        self.complete = flat.size == int(np.prod(self.shape))
        self.in_order = self.complete and bool((flat == np.arange(flat.size)).all())

    def scatter(self, rows: np.ndarray, fill: Any, dtype: Any) -> np.ndarray:
        """rows: [N, ...] -> [*grid shape, ...]; cells with no row hold ``fill``."""
        rows = np.asarray(rows)
        out = np.full(self.shape + rows.shape[1:], fill, dtype=dtype)
        out[self.index] = rows
        return out

    def arrange(self, rows: np.ndarray, fill: Any, dtype: Any) -> np.ndarray:
        """:meth:`scatter`, but ``rows`` reshaped without a copy when they already fill the grid in order (then the
        result shares ``rows``' memory, read-only when that is)."""
        rows = np.asarray(rows)
        if self.in_order and rows.dtype == np.dtype(dtype):
            return rows.reshape(self.shape + rows.shape[1:])
        if not self.complete:
            return self.scatter(rows, fill, dtype)
        out = np.empty(self.shape + rows.shape[1:], dtype=dtype)
        out[self.index] = rows
        return out
