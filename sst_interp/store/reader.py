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
import pyarrow.parquet as pq

from sst_interp.errors import UsageError
from sst_interp.store import manifest as mf
from sst_interp.store import schema as sch
from sst_interp.store.errors import CorruptRunError
from sst_interp.store.validate import check_shard, check_table_file


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
        top_indices: [P, I, L, k] int32, indices of the top-k |values| sorted ascending (-1 where not recorded).
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
    """A recorded run directory; open with :meth:`Run.open`."""

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = path
        self.manifest = manifest
        self.depths: list[int] = sorted({int(d) for d in manifest.get("depths", [])}
                                        | {int(d) for d, ids in manifest["status"].items() if ids})
        self.hidden_size: int = int(manifest.get("hidden_size", 0))
        self.num_layers: int = int(manifest.get("num_layers", 0))
        self.dtype: str = str(manifest.get("dtype", "float32"))
        self._question_order: list[str] | None = None

    @classmethod
    def open(cls, path: str | Path) -> Run:
        """Open and validate a run: manifest, every listed shard's size, footer and row count.

        Raises UsageError when ``path`` is not a run, CorruptRunError naming a damaged file.
        """
        path = Path(path)
        if not (path / mf.MANIFEST_NAME).is_file():
            raise UsageError(f"{path} is not a run directory (no {mf.MANIFEST_NAME}); pass the --out of a record run")
        try:
            manifest = mf.read_manifest(path)
        except ValueError as err:
            raise CorruptRunError(f"{path / mf.MANIFEST_NAME} is not valid JSON ({err}); the run cannot be read, "
                                  "record it again into a new --out") from err
        if manifest.get("schema_version") != sch.SCHEMA_VERSION or "status" not in manifest:
            raise UsageError(f"{path} has run schema version {manifest.get('schema_version')!r}; this package "
                             f"reads version {sch.SCHEMA_VERSION}")
        for batches in manifest.get("batches", {}).values():
            for batch in batches:
                for shard in batch["shards"].values():
                    check_shard(path, shard)
        for name in ("questions.parquet", "generations.parquet", "episodes.parquet"):
            if (path / name).exists():
                check_table_file(path / name)
        return cls(path, manifest)

    # ------------------------------------------------------------------------------------------ tables
    def questions(self) -> pd.DataFrame:
        """questions.parquet as a DataFrame (empty with the DESIGN columns when absent)."""
        target = self.path / "questions.parquet"
        if not target.exists():
            return sch.QUESTIONS_SCHEMA.empty_table().to_pandas()
        return pq.read_table(target).to_pandas()

    def generations(self) -> pd.DataFrame:
        """generations.parquet (one row per question, depth, turn), only completed (question, depth) pairs."""
        target = self.path / "generations.parquet"
        if not target.exists():
            return sch.GENERATIONS_SCHEMA.empty_table().to_pandas()
        table = pq.read_table(target)
        done = mf.completed_pairs(self.manifest)
        keep = [(q, int(d)) in done for q, d in zip(table.column("question_id").to_pylist(),
                                                      table.column("depth").to_pylist())]
        return table.filter(pa.array(keep, type=pa.bool_())).to_pandas()

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
        table = pq.read_table(target)
        keep = [(q, int(d)) in done for q, d in zip(table.column("question_id").to_pylist(),
                                                      table.column("depth").to_pylist())]
        return table.filter(pa.array(keep, type=pa.bool_())).to_pandas()

    def question_ids(self, depth: int | None = None) -> list[str]:
        """Completed question ids at ``depth`` (None: complete at every depth of the run), in questions order."""
        status = self.manifest["status"]
        if depth is None:
            sets = [set(status.get(str(d), [])) for d in self.depths]
            done = set.intersection(*sets) if sets else set()
        else:
            done = set(status.get(str(int(depth)), []))
        order = self._order()
        ranked = [q for q in order if q in done]
        extra = sorted(done - set(order))
        return ranked + extra

    def _order(self) -> list[str]:
        if self._question_order is None:
            target = self.path / "questions.parquet"
            self._question_order = (pq.read_table(target, columns=["question_id"]).column(0).to_pylist()
                                    if target.exists() else [])
        return self._question_order

    # ------------------------------------------------------------------------------------------ streams
    def hidden(self, depth: int, question_ids: Sequence[str] | None = None, turn: int | None = None,
               layers: Sequence[int] | None = None, positions: Sequence[int] | None = None) -> Iterator[HiddenBlock]:
        """Yield one HiddenBlock per (question, turn): values [P, I, L, d] float32."""
        for qid, table in self._tables("hidden", depth, question_ids):
            table = _filter(table, turn=turn, layer=layers, position=positions)
            for t, part in _by_turn(table):
                grid = _Grid(part, ("position", "iteration", "layer"))
                values = sch.decode_hidden_values(part.column("values"), self.hidden_size, self.dtype)
                yield HiddenBlock(qid, t, *grid.axes, grid.scatter(values, np.nan, np.float32))

    def logits(self, depth: int, question_ids: Sequence[str] | None = None,
               turn: int | None = None) -> Iterator[LogitBlock]:
        """Yield one LogitBlock per (question, turn): arrays [P, I] and [P, I, K]."""
        for qid, table in self._tables("logits", depth, question_ids):
            table = _filter(table, turn=turn)
            for t, part in _by_turn(table):
                grid = _Grid(part, ("position", "iteration"))
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
        """Yield one SketchBlock per (question, turn): top_indices [P, I, L, k] int32."""
        for qid, table in self._tables("sketch", depth, question_ids):
            table = _filter(table, turn=turn)
            for t, part in _by_turn(table):
                grid = _Grid(part, ("position", "iteration", "layer"))
                top = sch.decode_fixed_list(part.column("top_indices"), np.int32)
                yield SketchBlock(qid, t, *grid.axes, grid.scatter(top, -1, np.int32))

    def gates(self, depth: int, question_ids: Sequence[str] | None = None,
              turn: int | None = None) -> Iterator[GateBlock]:
        """Yield one GateBlock per (question, turn): active_fraction [P, I, L] float32."""
        for qid, table in self._tables("gates", depth, question_ids):
            table = _filter(table, turn=turn)
            for t, part in _by_turn(table):
                grid = _Grid(part, ("position", "iteration", "layer"))
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
        """Yield (question id, that question's rows of ``kind`` at ``depth``), reading one row group each."""
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
        index = mf.shard_index(self.manifest, kind, depth)
        open_files: dict[str, pq.ParquetFile] = {}
        try:
            for qid in wanted:
                if qid not in index:
                    continue  # the question has no rows of this kind (e.g. no sketch positions generated)
                rel, group = index[qid]
                if rel not in open_files:
                    open_files.clear()
                    open_files[rel] = pq.ParquetFile(self.path / rel)
                table = open_files[rel].read_row_group(group)
                if table.num_rows and table.column("question_id")[0].as_py() != qid:
                    raise CorruptRunError(f"shard {self.path / rel} row group {group} does not hold question "
                                          f"{qid!r}; delete it and rerun the same record command to resume")
                yield qid, table
        finally:
            open_files.clear()

    def config(self) -> dict[str, Any]:
        """The manifest without the bookkeeping keys (status, batches), for display."""
        return {k: v for k, v in self.manifest.items() if k not in ("status", "batches")}

    def __repr__(self) -> str:
        counts = {d: len(self.manifest["status"].get(str(d), [])) for d in self.depths}
        return f"Run({str(self.path)!r}, depths={counts}, d={self.hidden_size}, L={self.num_layers}, {self.dtype})"

    def to_json(self) -> str:
        """The manifest as JSON text."""
        return json.dumps(self.manifest, indent=1)


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

    def __init__(self, table: pa.Table, names: Sequence[str]) -> None:
        coords = [table.column(n).to_numpy().astype(np.int64) for n in names]
        self.axes = [np.unique(c) for c in coords]
        self.index = tuple(np.searchsorted(axis, c) for axis, c in zip(self.axes, coords))
        self.shape = tuple(len(a) for a in self.axes)

    def scatter(self, rows: np.ndarray, fill: Any, dtype: Any) -> np.ndarray:
        """rows: [N, ...] -> [*grid shape, ...]; cells with no row hold ``fill``."""
        rows = np.asarray(rows)
        out = np.full(self.shape + rows.shape[1:], fill, dtype=dtype)
        out[self.index] = rows
        return out
