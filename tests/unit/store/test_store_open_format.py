"""The run format is open: a run written with plain pyarrow to DESIGN section 5 alone (no RunWriter, no private
index) reads and analyses exactly as the same data written by RunWriter; off-contract files are refused on open."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sst_interp.analyses import basins, evaluation, overlap
from sst_interp.kernels.errors import UsageError
from sst_interp.store import CorruptRunError, Run, RunWriter
from tests.unit.store.conftest import D, IDENTITY, LAYERS, SKETCH_K, TOP_K, extra, make_batch, question_frame

IDS = ["q1", "q2", "q3", "q4"]
DEPTHS = (1, 2)
TURNS = 2
COORDS = ("turn", "position", "iteration", "layer")


def _data() -> dict[int, dict]:
    """Per depth: make_batch's columns (two turns, as a CodeACT run) with random hidden values (so that overlap
    varies), and one episode row per question."""
    rng = np.random.default_rng(7)
    out = {}
    for depth in DEPTHS:
        batch = make_batch(IDS, depth, positions=3, turns=TURNS)
        values = rng.normal(size=batch["hidden"]["values"].shape).astype(np.float32)
        batch["hidden"]["values"] = values
        batch["sketch"]["top_indices"] = np.sort(np.argsort(-np.abs(values), axis=1)[:, :SKETCH_K], axis=1)
        batch["sketch"]["top_indices"] = batch["sketch"]["top_indices"].astype(np.int32)
        for i, row in enumerate(batch["generations"]):
            row["correct"] = bool((i + depth) % 3)
        batch["episodes"] = [
            {"question_id": q, "depth": depth, "n_turns": TURNS, "stop_reason": "finish_session",
             "final_answer": "3", "correct": bool((i * 2 + depth) % 3), "grader": "exact", "depth_policy": "fixed",
             "chosen_depth": depth}
            for i, q in enumerate(IDS)]
        out[depth] = batch
    return out


def _writer_run(path: Path, data: dict[int, dict]) -> Path:
    settings = dict(extra(), depths=list(DEPTHS), protocol="codeact", prompt_mode="two_pass")
    with RunWriter.create_or_resume(path, IDENTITY, settings) as writer:
        writer.write_questions(question_frame(IDS))
        for depth, batch in data.items():
            writer.submit(depth, IDS[:3], **_subset(batch, IDS[:3]))
            writer.submit(depth, IDS[3:], **_subset(batch, IDS[3:]))
    return path


def _subset(batch: dict, ids: list[str]) -> dict:
    out = {}
    for kind in ("hidden", "logits", "sketch", "gates"):
        keep = np.isin(batch[kind]["question_id"], ids)
        out[kind] = {k: np.asarray(v)[keep] for k, v in batch[kind].items()}
    out["generations"] = [r for r in batch["generations"] if r["question_id"] in ids]
    out["episodes"] = [r for r in batch["episodes"] if r["question_id"] in ids]
    return out


# ---------------------------------------------------------------------------------------------- the foreign writer


def _fixed(values: np.ndarray, value_type: pa.DataType) -> pa.Array:
    values = np.ascontiguousarray(values)
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1), type=value_type), values.shape[1])


def _shard_table(kind: str, columns: dict, order: np.ndarray) -> pa.Table:
    """A shard as another tool might write it: int64 coordinates, columns in another order, rows shuffled."""
    arrays = {name: pa.array(np.asarray(columns[name])[order], type=pa.int64())
              for name in COORDS if name in columns}
    arrays["question_id"] = pa.array(np.asarray(columns["question_id"])[order].astype(str), type=pa.string())
    metadata = None
    if kind == "hidden":
        arrays["values"] = _fixed(np.asarray(columns["values"])[order], pa.float32())
        metadata = {b"sst_interp.dtype": b"float32"}
    elif kind == "logits":
        arrays["argmax"] = pa.array(np.asarray(columns["argmax"])[order], type=pa.int32())
        arrays["top_ids"] = _fixed(np.asarray(columns["top_ids"])[order], pa.int32())
        arrays["top_logprobs"] = _fixed(np.asarray(columns["top_logprobs"])[order], pa.float32())
        arrays["entropy"] = pa.array(np.asarray(columns["entropy"])[order], type=pa.float32())
        arrays["tracked_logprobs"] = _fixed(np.asarray(columns["tracked_logprobs"])[order], pa.float32())
    elif kind == "sketch":
        arrays["top_indices"] = _fixed(np.asarray(columns["top_indices"])[order], pa.int32())
    else:
        arrays["active_fraction"] = pa.array(np.asarray(columns["active_fraction"])[order], type=pa.float32())
        arrays["sign_bits"] = pa.array([r.tobytes() for r in np.asarray(columns["sign_bits"])[order]], pa.binary())
    names = sorted(arrays)  # not the writer's column order
    return pa.table([arrays[n] for n in names], names=names).replace_schema_metadata(metadata)


def _foreign_run(path: Path, data: dict[int, dict], manifest_changes: dict | None = None) -> Path:
    """Write ``data`` to the contract only: required manifest fields, three tables, hive-partitioned shards
    (two files per partition, one holding several questions in a single row group), no checksums, no index."""
    path.mkdir(parents=True)
    manifest = {"schema_version": 1, "depths": list(DEPTHS), "num_layers": LAYERS, "hidden_size": D,
                "dtype": "float32", "top_k": TOP_K, "full_positions": 3, "protocol": "codeact",
                "prompt_mode": "two_pass", "status": {str(d): list(IDS) for d in DEPTHS}}
    manifest.update(manifest_changes or {})
    (path / "manifest.json").write_text(json.dumps(manifest))
    pq.write_table(pa.Table.from_pandas(question_frame(IDS), preserve_index=False), path / "questions.parquet")
    gens = pd.DataFrame([dict(row, depth=d, depth_policy="fixed", chosen_depth=d)
                         for d, batch in data.items() for row in batch["generations"]])
    gens_table = pa.table({
        "question_id": pa.array(gens["question_id"]), "depth": pa.array(gens["depth"], pa.int32()),
        "turn": pa.array(gens["turn"], pa.int32()), "token_ids": pa.array(gens["token_ids"], pa.list_(pa.int32())),
        "text": pa.array(gens["text"]), "n_tokens": pa.array(gens["n_tokens"], pa.int32()),
        "stop_reason": pa.array(gens["stop_reason"]), "extracted_answer": pa.array(gens["extracted_answer"]),
        "correct": pa.array(gens["correct"]), "grader": pa.array(gens["grader"]),
        "depth_policy": pa.array(gens["depth_policy"]), "chosen_depth": pa.array(gens["chosen_depth"], pa.int32()),
    })
    pq.write_table(gens_table, path / "generations.parquet")
    episodes = pd.DataFrame([row for batch in data.values() for row in batch["episodes"]])
    pq.write_table(pa.Table.from_pandas(episodes, preserve_index=False), path / "episodes.parquet")
    rng = np.random.default_rng(3)
    for depth, batch in data.items():
        for kind in ("hidden", "logits", "sketch", "gates"):
            columns = batch[kind]
            qids = np.asarray(columns["question_id"]).astype(str)
            folder = path / kind / f"depth={depth}"
            folder.mkdir(parents=True)
            several = np.flatnonzero(np.isin(qids, ["q4", "q1", "q3"]))
            pq.write_table(_shard_table(kind, columns, rng.permutation(several)), folder / "bulk.parquet")
            rest = np.flatnonzero(qids == "q2")
            pq.write_table(_shard_table(kind, columns, rng.permutation(rest)), folder / "q2.parquet",
                           row_group_size=5)  # one question over several row groups
    return path


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    root = tmp_path_factory.mktemp("open")
    data = _data()
    return Run.open(_writer_run(root / "writer", data)), Run.open(_foreign_run(root / "foreign", data))


# ---------------------------------------------------------------------------------------------- same reads


def test_foreign_run_has_no_private_index(both):
    _, foreign = both
    assert set(foreign.manifest) >= {"status", "depths"} and "batches" not in foreign.manifest
    assert "identity" not in foreign.manifest


def test_layout_and_question_ids_are_the_same(both):
    writer, foreign = both
    assert writer.depths == foreign.depths == [1, 2]
    assert (writer.hidden_size, writer.num_layers, writer.dtype) == (foreign.hidden_size, foreign.num_layers,
                                                                     foreign.dtype)
    assert writer.protocol == foreign.protocol == "codeact"
    for depth in (None, *DEPTHS):
        assert writer.question_ids(depth) == foreign.question_ids(depth) == IDS


@pytest.mark.parametrize("kind", ["hidden", "logits", "sketch", "gates"])
@pytest.mark.parametrize("depth", DEPTHS)
def test_blocks_are_the_same_arrays(both, kind, depth):
    writer, foreign = both
    a = list(getattr(writer, kind)(depth))
    b = list(getattr(foreign, kind)(depth))
    assert len(a) == len(b) == len(IDS) * TURNS
    for x, y in zip(a, b):
        assert (x.question_id, x.turn) == (y.question_id, y.turn)
        for name, value in vars(x).items():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(value, getattr(y, name), err_msg=f"{kind} {name}")
                assert value.dtype == getattr(y, name).dtype


def test_filtered_and_selected_reads_are_the_same(both):
    writer, foreign = both
    kwargs = dict(question_ids=["q2", "q4"], turn=1, layers=[0, 2], positions=[1])
    for x, y in zip(writer.hidden(2, **kwargs), foreign.hidden(2, **kwargs), strict=True):
        assert x.values.shape == (1, 2, 2, D)
        np.testing.assert_array_equal(x.values, y.values)


def _canonical(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    frame = frame.sort_values(keys).reset_index(drop=True)
    return frame.apply(lambda col: col.map(lambda v: list(v) if isinstance(v, np.ndarray) else v))


def test_generations_and_episodes_are_the_same(both):
    writer, foreign = both
    contract = ["question_id", "depth", "turn", "token_ids", "text", "n_tokens", "stop_reason", "extracted_answer",
                "correct", "grader", "depth_policy", "chosen_depth"]
    keys = ["question_id", "depth", "turn"]
    pd.testing.assert_frame_equal(_canonical(writer.generations()[contract], keys),
                                  _canonical(foreign.generations()[contract], keys), check_dtype=False)
    episode_cols = ["question_id", "depth", "n_turns", "stop_reason", "final_answer", "correct", "grader",
                    "depth_policy", "chosen_depth"]
    pd.testing.assert_frame_equal(_canonical(writer.episodes()[episode_cols], keys[:2]),
                                  _canonical(foreign.episodes()[episode_cols], keys[:2]), check_dtype=False)


def test_analyses_give_the_same_results(both):
    writer, foreign = both
    results = []
    for run in both:
        cross = overlap.cross_run_overlap(run, k=3, source="hidden")
        summary = basins.basin_summary(cross, threshold=float(np.nanmedian(cross.values)))
        staged = evaluation.staged_breakdown(run)
        results.append((cross, summary, staged))
    (cross_a, basin_a, staged_a), (cross_b, basin_b, staged_b) = results
    np.testing.assert_array_equal(cross_a.values, cross_b.values)
    assert np.isfinite(cross_a.values).any() and np.nanstd(cross_a.values) > 0
    np.testing.assert_array_equal(basin_a.low, basin_b.low)
    np.testing.assert_array_equal(basin_a.counts, basin_b.counts)
    pd.testing.assert_frame_equal(staged_a.table(), staged_b.table())


# ---------------------------------------------------------------------------------------------- refused on open


def _rewrite_shard(path: Path, kind: str, change) -> Path:
    target = path / kind / "depth=1" / "bulk.parquet"
    table = pq.read_table(target)
    pq.write_table(change(table), target)
    return target


@pytest.mark.parametrize("kind,column", [("hidden", "iteration"), ("logits", "entropy"), ("sketch", "layer"),
                                         ("gates", "active_fraction")])
def test_a_shard_missing_a_contract_column_is_refused_on_open(tmp_path, kind, column):
    path = _foreign_run(tmp_path / "run", _data())
    target = _rewrite_shard(path, kind, lambda t: t.drop_columns([column]))
    with pytest.raises(CorruptRunError, match=rf"{target}.*lacks the contract column '{column}'") as info:
        Run.open(path)
    assert "\n" not in str(info.value)


def test_a_mistyped_column_or_dtype_is_refused_on_open(tmp_path):
    path = _foreign_run(tmp_path / "run", _data())
    target = _rewrite_shard(path, "logits", lambda t: t.set_column(
        t.schema.get_field_index("top_ids"), "top_ids", t.column("top_ids").cast(pa.list_(pa.int64(), TOP_K))))
    with pytest.raises(CorruptRunError, match=rf"{target} column 'top_ids' is fixed_size_list<.*int64>\[4\], the contract says "
                                             r"fixed_size_list<int32>\[4\]"):
        Run.open(path)
    path = _foreign_run(tmp_path / "run2", _data())
    target = _rewrite_shard(path, "hidden", lambda t: t.replace_schema_metadata({b"sst_interp.dtype": b"bfloat16"}))
    with pytest.raises(CorruptRunError, match=str(target)):
        Run.open(path)
    path = _foreign_run(tmp_path / "run3", _data())
    gens = pq.read_table(path / "generations.parquet")
    pq.write_table(gens.drop_columns(["correct"]), path / "generations.parquet")
    with pytest.raises(CorruptRunError, match=r"generations\.parquet lacks the contract column 'correct'"):
        Run.open(path)


@pytest.mark.parametrize("changes,match", [
    ({"hidden_size": None}, "field 'hidden_size' must be a positive int"),
    ({"status": {"q1": 1}}, "field 'status' must be an object"),
    ({"protocol": "chat"}, "field 'protocol' must be one of completion|codeact"),
    ({"schema_version": 9}, "schema version 9"),
])
def test_a_manifest_off_contract_is_a_one_line_usage_error(tmp_path, changes, match):
    path = _foreign_run(tmp_path / "run", _data(), changes)
    with pytest.raises(UsageError, match=match) as info:
        Run.open(path)
    assert "\n" not in str(info.value)


def test_a_missing_required_field_is_named(tmp_path):
    path = _foreign_run(tmp_path / "run", _data())
    manifest = json.loads((path / "manifest.json").read_text())
    del manifest["top_k"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UsageError, match="lacks the required field 'top_k'"):
        Run.open(path)


def test_a_duplicated_shard_is_refused_on_open(tmp_path):
    path = _foreign_run(tmp_path / "run", _data())
    folder = path / "hidden" / "depth=1"
    (folder / "copy.parquet").write_bytes((folder / "q2.parquet").read_bytes())
    with pytest.raises(CorruptRunError, match=r"hidden/depth=1/.*parquet disagrees.* repeat .*question 'q2'"):
        Run.open(path)


def test_the_report_cli_turns_an_off_contract_run_into_one_error_line(tmp_path, capsys):
    from sst_interp.cli.report import main

    path = _foreign_run(tmp_path / "run", _data())
    _rewrite_shard(path, "hidden", lambda t: t.drop_columns(["layer"]))
    with pytest.raises(SystemExit) as info:
        main(["--run", str(path), "--out", str(tmp_path / "report"), "--quiet"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "'layer'" in err[0]
