"""Run: the streaming reader of a run directory (one (question, turn) block at a time).

The blocks it yields are :mod:`sst_interp.store.blocks`; turning a question's stored rows into a block's arrays is
:mod:`sst_interp.store.rows`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from sst_interp.kernels.errors import UsageError
from sst_interp.store import manifest as mf
from sst_interp.store import schema as sch
from sst_interp.store import consistency, contract, discovery, integrity
from sst_interp.store.blocks import BF16_NAN, GateBlock, HiddenBlock, LogitBlock, RawHiddenBlock, SketchBlock
from sst_interp.store.chunks import HiddenChunk, read_chunks
from sst_interp.store.discovery import QuestionIndex, ShardFile
from sst_interp.store.errors import CorruptRunError
from sst_interp.store.rebuild import has_run_files
from sst_interp.store.rows import GroupReader, Grid, bf16_rows, by_turn, filter_rows
from sst_interp.store.validate import check_shard, check_table_file, read_footer


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

    @property
    def shard_kinds(self) -> list[str]:
        """The kinds of shard the run holds (``hidden``, ``logits``, ``sketch``, ``gates``, ``attention``), found in
        its layout."""
        return [kind for kind in sch.KINDS if any(s.kind == kind for s in self._shards)]

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
            table = filter_rows(table, turn=turn, layer=layers, position=positions)
            for t, part in by_turn(table):
                grid = Grid(part, ("position", "iteration", "layer"), _where(self.path, "hidden", depth, qid, t))
                values = sch.decode_hidden_values(part.column("values"), self.hidden_size, self.dtype)
                yield HiddenBlock(qid, t, *grid.axes, grid.scatter(values, np.nan, np.float32))

    def hidden_raw(self, depth: int, question_ids: Sequence[str] | None = None, turn: int | None = None,
                   layers: Sequence[int] | None = None, positions: Sequence[int] | None = None
                   ) -> Iterator[RawHiddenBlock]:
        """Like :meth:`hidden`, but yield the values as stored (:class:`RawHiddenBlock`: bfloat16 bit patterns not
        widened), for analyses that widen only the part they use (one iteration, one layer, magnitudes)."""
        for qid, table in self._tables("hidden", depth, question_ids):
            table = filter_rows(table, turn=turn, layer=layers, position=positions)
            for t, part in by_turn(table):
                grid = Grid(part, ("position", "iteration", "layer"), _where(self.path, "hidden", depth, qid, t))
                if self.dtype == "float32":
                    rows = sch.decode_hidden_values(part.column("values"), self.hidden_size, self.dtype)
                    raw = grid.arrange(rows, np.nan, np.float32)
                else:
                    rows = bf16_rows(part.column("values"), self.hidden_size)
                    raw = grid.arrange(rows, BF16_NAN, np.uint16)
                yield RawHiddenBlock(qid, t, *grid.axes, raw, self.dtype, grid.complete)

    def hidden_rows(self, depth: int, layers: Sequence[int] | None = None, iterations: Sequence[int] | None = None,
                    positions: Sequence[int] | None = None, turn: int | None = None) -> Iterator[HiddenChunk]:
        """Yield the hidden states at ``depth`` one shard file at a time, as rows with their coordinates
        (:class:`~sst_interp.store.chunks.HiddenChunk`: values [N, d] float32), narrowed to the given coordinates
        (None: all) and to the questions completed at the depth. For consumers that stream every state of a site
        (a dictionary's training set) at the rate the shards read; :meth:`hidden` arranges one question at a time."""
        files = [(s.rel, s.metadata) for s in self._shards if s.kind == "hidden" and s.depth == int(depth)]
        yield from read_chunks(self.path, files, self.hidden_size, self.dtype, set(self.question_ids(depth)),
                               layers=layers, iterations=iterations, positions=positions, turn=turn)

    def logits(self, depth: int, question_ids: Sequence[str] | None = None,
               turn: int | None = None) -> Iterator[LogitBlock]:
        """Yield one LogitBlock per (question, turn): arrays [P, I] and [P, I, K]."""
        for qid, table in self._tables("logits", depth, question_ids):
            table = filter_rows(table, turn=turn)
            for t, part in by_turn(table):
                grid = Grid(part, ("position", "iteration"), _where(self.path, "logits", depth, qid, t))
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
            table = filter_rows(table, turn=turn)
            for t, part in by_turn(table):
                grid = Grid(part, ("position", "iteration", "layer"), _where(self.path, "sketch", depth, qid, t))
                top = sch.decode_fixed_list(part.column("top_indices"), np.int32)
                yield SketchBlock(qid, t, *grid.axes, grid.scatter(top, -1, np.int32))

    def gates(self, depth: int, question_ids: Sequence[str] | None = None,
              turn: int | None = None) -> Iterator[GateBlock]:
        """Yield one GateBlock per (question, turn): active_fraction [P, I, L] float32."""
        for qid, table in self._tables("gates", depth, question_ids):
            table = filter_rows(table, turn=turn)
            for t, part in by_turn(table):
                grid = Grid(part, ("position", "iteration", "layer"), _where(self.path, "gates", depth, qid, t))
                frac = grid.scatter(part.column("active_fraction").to_numpy(), np.nan, np.float32)
                bits = None
                if "sign_bits" in part.schema.names:
                    rows = part.column("sign_bits").to_pylist()
                    width = max((len(r) for r in rows), default=0)
                    packed = np.array([np.frombuffer(r.ljust(width, b"\0"), dtype=np.uint8) for r in rows],
                                      dtype=np.uint8).reshape(len(rows), width)
                    bits = grid.scatter(packed, 0, np.uint8)
                yield GateBlock(qid, t, *grid.axes, frac, bits)

    def attention(self, depth: int | None = None, question_ids: Sequence[str] | None = None, turn: int | None = None,
                  positions: Sequence[int] | None = None, iterations: Sequence[int] | None = None,
                  layers: Sequence[int] | None = None, heads: Sequence[int] | None = None) -> pd.DataFrame:
        """The recorded attention (``record --attention``) as tidy rows, one per (question, depth, turn, query
        position, iteration, layer, head, key): ``question_id``, ``depth``, ``turn``, ``position``, ``iteration``,
        ``layer``, ``head``, ``key_position`` (the key's index in the row's context: prompt tokens from 0, then
        each token fed after them), ``weight``, and ``remaining_mass`` (of the (query, head) row: 1 - the sum of its
        stored weights; the mass on keys a top-k run left out). ``depth`` None reads every depth; the other
        arguments narrow the rows.

        Raises UsageError when the run recorded no attention, or a question is not recorded at ``depth``."""
        if "attention" not in self.shard_kinds:
            raise UsageError(f"{self.path} recorded no attention; record it with python -m sst_interp.record "
                             "--attention LAYERS[:HEADS]")
        frames = []
        for k in (self.depths if depth is None else [int(depth)]):
            for _qid, table in self._tables("attention", k, question_ids):
                table = filter_rows(table, turn=turn, position=positions, iteration=iterations, layer=layers,
                                    head=heads)
                frames.append(attention_rows(table, k))
        if not frames:
            return attention_rows(sch.attention_schema().empty_table(), 0)
        return pd.concat(frames, ignore_index=True)

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
        reader = GroupReader(self.path, {s.rel: s.metadata for s in self._shards})
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


def attention_rows(table: pa.Table, depth: int) -> pd.DataFrame:
    """Attention shard rows ``table`` (one per query and head) exploded into one row per key, tidy (see
    :meth:`Run.attention`)."""
    keys, weights = table.column("key_positions"), table.column("weights")
    lengths = pc.list_value_length(keys).to_numpy(zero_copy_only=False).astype(np.int64) if table.num_rows \
        else np.zeros(0, np.int64)

    def repeated(name: str) -> np.ndarray:
        return np.repeat(table.column(name).to_numpy(zero_copy_only=False), lengths)

    return pd.DataFrame({
        "question_id": np.repeat(np.asarray(table.column("question_id").to_pylist(), dtype=object), lengths),
        "depth": np.full(int(lengths.sum()), depth, dtype=np.int64),
        **{name: repeated(name).astype(np.int64) for name in ("turn", "position", "iteration", "layer", "head")},
        "key_position": np.asarray(pc.list_flatten(keys).to_numpy(zero_copy_only=False), dtype=np.int64),
        "weight": np.asarray(pc.list_flatten(weights).to_numpy(zero_copy_only=False), dtype=np.float32),
        "remaining_mass": repeated("remaining_mass").astype(np.float32),
    })


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


def _where(path: Path, kind: str, depth: int, qid: str, turn: int) -> str:
    return f"{path}/{kind}/depth={int(depth)} question {qid!r} turn {turn}"
