"""Consistency of a run: the manifest agrees with its shards and tables, and every recorded block occurs once.

The byte checks (:mod:`sst_interp.store.integrity`) prove each file is what was written; these prove the files
and the manifest describe the same run. Each :class:`Finding` names the file at fault: ``manifest.json`` when
the manifest is what disagrees with files that agree among themselves, else the file.

Two costs: :func:`footer_findings` reads footers only (plus the coordinate columns of row groups whose footer
statistics say they may overlap), so :meth:`sst_interp.store.Run.open` runs it on every open;
:func:`table_findings` reads the tables' key columns and :func:`duplicate_blocks` with ``full=True`` reads every
shard's coordinate columns, for ``verify``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sst_interp.store import integrity, stamp
from sst_interp.store import manifest as mf
from sst_interp.store import schema as sch
from sst_interp.store.discovery import ShardFile, single_value
from sst_interp.store.errors import CorruptRunError
from sst_interp.store.manifest import REPAIR_COMMAND

#: What to run when the manifest is the file at fault.
COORDS = {"hidden": ("turn", "position", "iteration", "layer"), "logits": ("turn", "position", "iteration"),
          "sketch": ("turn", "position", "iteration", "layer"), "gates": ("turn", "position", "iteration", "layer"),
          "attention": ("turn", "position", "iteration", "layer", "head")}
#: Kinds that hold every recorded layer (attention holds the layers --attention chose, so it says nothing of
#: num_layers).
LAYERED = ("hidden", "sketch", "gates")


@dataclass(frozen=True)
class Finding:
    """One inconsistency: ``file`` (relative to the run; ``manifest.json`` when the manifest disagrees) and why."""

    file: str
    reason: str
    advice: str | None = None

    def message(self, run: Path) -> str:
        """One line for a user: the file, the reason and the way out."""
        advice = self.advice
        if advice is None and self.file == mf.MANIFEST_NAME:
            advice = f"{REPAIR_COMMAND} {run} rebuilds it from the shards and tables"
        elif advice is None:
            advice = f"rerun the same record command (or {REPAIR_COMMAND} {run}) to drop the repeat"
        return f"{run / self.file} disagrees with the run: {self.reason}; {advice}"


# ---------------------------------------------------------------------------------------------- footers


@dataclass(frozen=True)
class _Group:
    """One row group of a shard as its footer describes it: the question it holds (None: several or unknown) and
    the [min, max] of each coordinate (None where the footer has no statistics)."""

    rel: str
    index: int
    question: str | None
    box: dict[str, tuple[int, int] | None]


def _groups(shard: ShardFile) -> list[_Group]:
    meta = shard.metadata
    schema = meta.schema.to_arrow_schema()
    names = {name: schema.get_field_index(name) for name in ("question_id",) + COORDS[shard.kind]}
    if min(names.values()) < 0:
        return []  # off the contract: the contract check names the missing column
    out = []
    for index in range(meta.num_row_groups):
        group = meta.row_group(index)
        if group.num_rows == 0:
            continue
        box: dict[str, tuple[int, int] | None] = {}
        for name in COORDS[shard.kind]:
            stats = group.column(names[name]).statistics
            box[name] = (int(stats.min), int(stats.max)) if stats is not None and stats.has_min_max else None
        question = single_value(group.column(names["question_id"]).statistics)
        out.append(_Group(shard.rel, index, question, box))
    return out


def _width(shard: ShardFile) -> int | None:
    """Values per row of a hidden shard (d), or the list size of a logits shard's ``top_ids`` (K)."""
    schema = shard.metadata.schema.to_arrow_schema()
    name = "values" if shard.kind == "hidden" else "top_ids"
    index = schema.get_field_index(name)
    if index < 0:
        return None  # a missing column is the contract check's to report
    kind = schema.field(index).type
    if pa.types.is_fixed_size_list(kind):
        return int(kind.list_size)
    if pa.types.is_fixed_size_binary(kind) and shard.kind == "hidden":
        return int(kind.byte_width) // 2  # bfloat16 bits
    return None


def _file_dtype(shard: ShardFile) -> str | None:
    raw = (shard.metadata.schema.to_arrow_schema().metadata or {}).get(sch.DTYPE_KEY)
    return raw.decode() if raw is not None else None


def layout_findings(manifest: dict[str, Any], shards: Sequence[ShardFile]) -> tuple[list[Finding], dict[str, Any]]:
    """The manifest's ``hidden_size``, ``top_k``, ``dtype``, ``num_layers`` and ``depths`` against the shards.

    A manifest value is at fault when every shard that carries it agrees on another value; shards that disagree
    among themselves are left to the per-shard contract check. Returns the findings and the layout the shards
    say (the manifest with the values the shards agree on), against which each shard's columns are checked, so
    that a wrong manifest value blames the manifest, not every shard.
    """
    findings: list[Finding] = []
    corrected = dict(manifest)
    agreed = {
        "hidden_size": {_width(s) for s in shards if s.kind == "hidden"} - {None},
        "top_k": {_width(s) for s in shards if s.kind == "logits"} - {None},
        "dtype": {_file_dtype(s) for s in shards if s.kind == "hidden"} - {None},
    }
    holders = {"hidden_size": "hidden shard holds", "top_k": "logits shard holds top_ids of", "dtype":
               "hidden shard holds"}
    for key, values in agreed.items():
        if len(values) == 1 and (value := values.pop()) != manifest.get(key):
            findings.append(Finding(mf.MANIFEST_NAME, f"it says {key} {manifest.get(key)!r}, but every "
                                    f"{holders[key]} {value!r}"))
            corrected[key] = value
    layers = [g.box.get("layer") for s in shards if s.kind in LAYERED for g in _groups(s)]
    if layers and None not in layers:
        low, high = min(b[0] for b in layers), max(b[1] for b in layers)
        if low >= 0 and high + 1 != manifest.get("num_layers"):
            findings.append(Finding(mf.MANIFEST_NAME, f"it says num_layers {manifest.get('num_layers')!r}, but the "
                                    f"shards hold layers {low}..{high}"))
            corrected["num_layers"] = high + 1
    findings += _depth_findings(manifest, shards)
    return findings, corrected


def _depth_findings(manifest: dict[str, Any], shards: Sequence[ShardFile]) -> list[Finding]:
    """A depth a listed shard holds must be one of the manifest's; a manifest depth nothing holds must be one the
    recording commands asked for (their ``depths``, stamped in every file the writer wrote)."""
    findings = []
    status_depths = {int(d) for d, ids in manifest["status"].items() if ids}
    known = set(manifest["depths"]) | status_depths
    listed = set(mf.listed_shards(manifest))
    writer_run = isinstance(manifest.get("batches"), dict)
    for depth in sorted({s.depth for s in shards if (s.rel in listed or not writer_run)} - known):
        findings.append(Finding(mf.MANIFEST_NAME, f"its depths {manifest['depths']} lack depth {depth}, which "
                                f"the shards under depth={depth} hold"))
    stamps = [stamp.read_stamp(s.metadata) for s in shards]
    asked = {int(d) for st in stamps if st is not None for d in st.get("depths", []) if isinstance(d, int)}
    if any(st is not None for st in stamps):
        held = {s.depth for s in shards} | status_depths
        for depth in sorted(set(manifest["depths"]) - held - asked):
            findings.append(Finding(mf.MANIFEST_NAME, f"it lists depth {depth}, which no shard holds and no "
                                    "recording command asked for"))
    return findings


def status_findings(manifest: dict[str, Any], shards: Sequence[ShardFile]) -> list[Finding]:
    """``status`` against the writer's batch index (when there is one) and against the questions the shards'
    footers say they hold (where every row group's statistics name one question)."""
    findings = []
    status = {int(d): list(ids) for d, ids in manifest["status"].items()}
    batches = manifest.get("batches")
    if isinstance(batches, dict):
        for key, depth_batches in batches.items():
            depth, seen = int(key), {}
            for batch in depth_batches if isinstance(depth_batches, list) else []:
                for qid in batch.get("question_ids", []) if isinstance(batch, dict) else []:
                    if qid in seen:
                        findings.append(Finding(mf.MANIFEST_NAME, f"batches {seen[qid]} and {batch.get('batch')} "
                                                f"both hold question {qid!r} at depth {depth}"))
                    seen.setdefault(qid, batch.get("batch"))
            done = set(status.get(depth, []))
            for qid in [q for q in seen if q not in done][:3]:
                findings.append(Finding(mf.MANIFEST_NAME, f"batch {seen[qid]} holds question {qid!r} at depth {depth}"
                                        ", which its status does not list"))
            for qid in [q for q in status.get(depth, []) if q not in seen][:3]:
                findings.append(Finding(mf.MANIFEST_NAME, f"its status lists question {qid!r} at depth {depth}, "
                                        "which no batch of the manifest holds"))
    held: dict[int, set[str]] = defaultdict(set)
    unknown: set[int] = set()
    for shard in shards:
        for group in _groups(shard):
            if group.question is None:
                unknown.add(shard.depth)
            else:
                held[shard.depth].add(group.question)
    for depth, ids in sorted(status.items()):
        if depth in unknown:
            continue  # row groups of several questions: only verify's full read can say which
        missing = [q for q in ids if q not in held.get(depth, set())]
        if missing:
            findings.append(Finding(mf.MANIFEST_NAME, f"its status lists {len(missing)} question(s) at depth {depth} "
                                    f"that no shard holds (e.g. {missing[0]!r})"))
    return findings


def table_presence_findings(path: Path, manifest: dict[str, Any]) -> list[Finding]:
    """A table the writer recorded (in the manifest's ``tables``, or a batch's ``generations``/``episodes``
    flag) must be there: without it a reader would silently see no rows. Runs written by other tools record
    no tables, so nothing is required of them."""
    needed = set(manifest.get("tables", {})) if isinstance(manifest.get("tables"), dict) else set()
    for depth_batches in (manifest.get("batches") or {}).values():
        for batch in depth_batches if isinstance(depth_batches, list) else []:
            for flag in ("generations", "episodes"):
                if isinstance(batch, dict) and batch.get(flag):
                    needed.add(f"{flag}.parquet")
    if not any(manifest["status"].values()):
        return []
    return [Finding(name, "it is missing, but the manifest records it for the completed questions",
                    "rerun the same record command to record their questions again")
            for name in sorted(needed) if not (path / name).exists()]


def footer_findings(path: Path, manifest: dict[str, Any], shards: Sequence[ShardFile]) -> list[Finding]:
    """The checks after the layout's that need footers only (Run.open runs these once every shard's columns have
    passed the contract): status, recorded tables, and blocks recorded twice."""
    return status_findings(manifest, shards) + table_presence_findings(path, manifest) + \
        duplicate_blocks(path, shards, full=False)


# ---------------------------------------------------------------------------------------------- blocks


def _overlap(a: dict[str, tuple[int, int] | None], b: dict[str, tuple[int, int] | None]) -> bool:
    """True unless some coordinate's ranges are known to be disjoint."""
    for name, range_a in a.items():
        range_b = b.get(name)
        if range_a is not None and range_b is not None and (range_a[1] < range_b[0] or range_b[1] < range_a[0]):
            return False
    return True


def duplicate_blocks(path: Path, shards: Sequence[ShardFile], full: bool) -> list[Finding]:
    """Every (question, depth, turn, position, iteration[, layer[, head]]) block of each kind occurs once.

    ``full=False`` reads coordinates only where footers cannot rule a repeat out (a question in row groups whose
    coordinate ranges overlap, or in row groups of several questions); ``full=True`` reads every row group's
    coordinates, which also finds a block repeated inside one row group. Names the file holding the repeat.
    """
    findings = []
    by_place: dict[tuple[str, int], list[_Group]] = defaultdict(list)
    for shard in shards:
        by_place[(shard.kind, shard.depth)].extend(_groups(shard))
    for (kind, _depth), groups in sorted(by_place.items()):
        per_question: dict[str | None, list[_Group]] = defaultdict(list)
        for group in groups:
            per_question[group.question].append(group)
        shared = per_question.pop(None, [])
        suspects: list[list[_Group]] = []
        for _qid, own in per_question.items():
            if full or shared or any(_overlap(a.box, b.box) for i, a in enumerate(own) for b in own[i + 1:]):
                suspects.append(own + shared)
        if shared and not per_question:
            suspects.append(shared)
        reported: set[str] = set()
        for candidate in suspects:
            for finding in _repeats(path, kind, candidate):
                if finding.file not in reported:
                    reported.add(finding.file)
                    findings.append(finding)
    return findings


def _repeats(path: Path, kind: str, groups: Iterable[_Group]) -> list[Finding]:
    """Read the coordinates of ``groups`` and name the files whose rows repeat a block read before them."""
    columns = ["question_id", *COORDS[kind]]
    parts, owners = [], []
    for group in sorted(groups, key=lambda g: (g.rel, g.index)):
        handle = integrity.open_parquet(path / group.rel)
        table = integrity.read_row_group(handle, path / group.rel, group.index, columns)
        parts.append(table)
        owners.extend([group.rel] * table.num_rows)
    if not parts:
        return []
    table = pa.concat_tables(parts, promote_options="permissive")
    ids = pc.dictionary_encode(table.column("question_id").cast(pa.string())).combine_chunks()
    keys = np.stack([np.asarray(ids.indices, dtype=np.int64)] + [table.column(c).to_numpy().astype(np.int64)
                                                                 for c in COORDS[kind]], axis=1)
    _, first = np.unique(keys, axis=0, return_index=True)
    repeated = np.setdiff1d(np.arange(len(keys)), first)
    if not repeated.size:
        return []
    counts: dict[str, int] = defaultdict(int)
    example: dict[str, str] = {}
    names_of = ids.dictionary.to_pylist()
    for row in repeated:
        counts[owners[row]] += 1
        example.setdefault(owners[row], names_of[keys[row, 0]])
    names = ", ".join(COORDS[kind])
    return [Finding(rel, f"{count} of its {kind} rows repeat a (question, {names}) block already recorded in the "
                    f"run, e.g. of question {example[rel]!r} (a duplicated batch or a copied shard)")
            for rel, count in sorted(counts.items())]


# ---------------------------------------------------------------------------------------------- tables


def table_findings(path: Path, manifest: dict[str, Any]) -> list[Finding]:
    """``status`` against the rows of the tables (reads their key columns): every completed (question, depth)
    has generations rows (and, in a CodeACT run, exactly one episodes row) and a questions row; no generations
    row repeats a (question, depth, turn)."""
    findings: list[Finding] = []
    done = mf.completed_pairs(manifest)
    if not done:
        return findings
    checks = [("generations.parquet", ["question_id", "depth", "turn"]),
              ("episodes.parquet", ["question_id", "depth"])]
    for name, keys in checks:
        target = path / name
        if not target.exists():
            continue
        try:
            table = integrity.read_table(target, keys)
        except CorruptRunError:
            continue  # a damaged or off-contract table is reported by the byte and column checks
        rows = list(zip(*(table.column(k).to_pylist() for k in keys)))
        pairs = {(q, int(d)) for q, d, *_ in rows}
        lacking = sorted(done - pairs)
        if lacking:
            q, d = lacking[0]
            findings.append(Finding(mf.MANIFEST_NAME, f"its status lists {len(lacking)} (question, depth) pair(s) "
                                    f"with no row in {name} (e.g. {q!r} at depth {d})"))
        repeats = len(rows) - len(set(rows))
        if repeats:
            findings.append(Finding(name, f"{repeats} of its rows repeat a ({', '.join(keys)}) already in it"))
    questions = path / "questions.parquet"
    if questions.exists():
        try:
            known = set(integrity.read_table(questions, ["question_id"]).column(0).to_pylist())
        except CorruptRunError:
            return findings
        absent = sorted({q for q, _ in done} - known)
        if absent:
            findings.append(Finding("questions.parquet", f"it lacks {len(absent)} question(s) the manifest's status "
                                    f"lists (e.g. {absent[0]!r})"))
    return findings
