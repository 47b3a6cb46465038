"""Sketch indices: uint16 when d < 65,536 (exact round trip, read back as int32), int32 from 65,536 up, and runs
written with int32 indices before the narrowing still open, validate, verify, read and resume."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sst_interp.store import CorruptRunError, Run, RunWriter, verify_run
from sst_interp.store import contract, tables
from sst_interp.store import schema as sch
from tests.unit.store.conftest import IDENTITY, extra

LAYERS, POSITIONS, K = 2, 3, 5


def _sketch(qids: list[str], d: int, seed: int) -> dict[str, np.ndarray]:
    """Sketch columns for every (question, position, iteration 1, layer), with indices at both ends of [0, d) and
    above 32,767 where d allows (a signed 16-bit type would turn those negative)."""
    rng = np.random.default_rng(seed)
    rows = [(q, p, layer) for q in qids for p in range(POSITIONS) for layer in range(LAYERS)]
    top = np.sort(np.stack([rng.choice(d, K, replace=False) for _ in rows]), axis=1)
    top[0] = np.sort(np.array([0, d - 1, d // 2, min(32768, d - 2), 1]))
    q, p, layer = (np.array(c) for c in zip(*rows))
    n = len(rows)
    return {"question_id": q, "turn": np.zeros(n, np.int32), "position": p, "iteration": np.ones(n, np.int32),
            "layer": layer, "top_indices": top.astype(np.int64)}


def _write(path: Path, d: int, batches: list[list[str]], seed: int = 0) -> dict[str, np.ndarray]:
    """Write sketch-only batches into the run at ``path`` (created or resumed); returns the written indices by
    question, [P * L, k] in (position, layer) order."""
    settings = dict(extra(), hidden_size=d, num_layers=LAYERS, sketch_k=K, depths=[1])
    written = {}
    with RunWriter.create_or_resume(path, IDENTITY, settings) as writer:
        for i, ids in enumerate(batches):
            cols = _sketch(ids, d, seed + i)
            writer.submit(1, ids, sketch=cols)
            for qid in ids:
                written[qid] = cols["top_indices"][cols["question_id"] == qid]
    return written


def _read(run: Run, qid: str) -> np.ndarray:
    (block,) = run.sketch(1, question_ids=[qid])
    assert block.top_indices.dtype == np.int32  # readers get int32 whatever the shard stores
    assert block.top_indices.shape == (POSITIONS, 1, LAYERS, K)
    return block.top_indices[:, 0].reshape(POSITIONS * LAYERS, K)


def _stored_type(path: Path) -> pa.DataType:
    files = sorted((path / "sketch" / "depth=1").glob("*.parquet"))
    types = {pq.read_schema(f).field("top_indices").type.value_type for f in files}
    assert len(types) == 1, types
    return types.pop()


@pytest.mark.parametrize("d", [8, 5376, 65535])
def test_uint16_sketches_round_trip_exactly(tmp_path, d) -> None:
    written = _write(tmp_path / "run", d, [["a", "b"], ["c"]])
    assert _stored_type(tmp_path / "run") == pa.uint16()
    run = Run.open(tmp_path / "run")
    for qid, expected in written.items():
        np.testing.assert_array_equal(_read(run, qid), expected)
    assert written["a"].max() == d - 1 and written["a"].min() == 0


@pytest.mark.parametrize("d", [65536, 70000])
def test_a_hidden_size_of_65536_or_more_keeps_int32(tmp_path, d) -> None:
    assert sch.sketch_schema(1024, d).field("top_indices").type == pa.list_(pa.int32(), 1024)
    written = _write(tmp_path / "run", d, [["a"]])
    assert _stored_type(tmp_path / "run") == pa.int32()
    assert written["a"].max() == d - 1 >= 65535  # fits uint16 at d = 65536, yet the type is set by d
    np.testing.assert_array_equal(_read(Run.open(tmp_path / "run"), "a"), written["a"])


def test_the_index_type_switches_at_65536() -> None:
    assert sch.sketch_index_type(1) == sch.sketch_index_type(65535) == pa.uint16()
    assert sch.sketch_index_type(65536) == pa.int32()
    with pytest.raises(ValueError):
        sch.sketch_index_type(0)


@pytest.mark.parametrize("bad", [-1, 8])
def test_an_index_outside_the_hidden_size_is_refused_not_wrapped(bad) -> None:
    cols = _sketch(["a"], 8, 0)
    cols["top_indices"][2, 1] = bad
    with pytest.raises(ValueError, match=r"\[0, 8\)"):
        tables.build_shard_table("sketch", cols, ["a"], {"hidden_size": 8, "sketch_k": K})


def test_a_sketch_needs_the_hidden_size() -> None:
    with pytest.raises(ValueError, match="hidden_size"):
        tables.build_shard_table("sketch", _sketch(["a"], 8, 0), ["a"], {"sketch_k": K})


def _write_as_before(path: Path, d: int, batches: list[list[str]], monkeypatch) -> dict[str, np.ndarray]:
    """Write with the index type of the store before uint16 sketches (int32 for every d), manifest entries and
    checksums included, as an old version of the writer did."""
    with monkeypatch.context() as patch:
        patch.setattr(sch, "sketch_index_type", lambda hidden_size: pa.int32())
        return _write(path, d, batches)


def test_an_old_int32_sketch_run_still_reads_validates_and_verifies(tmp_path, monkeypatch) -> None:
    path = tmp_path / "run"
    written = _write_as_before(path, 5376, [["a", "b"]], monkeypatch)
    assert _stored_type(path) == pa.int32()
    run = Run.open(path)  # validates every shard's contract columns
    for qid, expected in written.items():
        np.testing.assert_array_equal(_read(run, qid), expected)
    assert verify_run(path).ok


def test_resuming_an_old_int32_run_adds_uint16_shards_and_both_read(tmp_path, monkeypatch) -> None:
    path = tmp_path / "run"
    written = _write_as_before(path, 5376, [["a"]], monkeypatch)
    written.update(_write(path, 5376, [["b"]], seed=5))
    types = {pq.read_schema(f).field("top_indices").type.value_type for f in (path / "sketch" / "depth=1").iterdir()}
    assert types == {pa.int32(), pa.uint16()}
    run = Run.open(path)
    for qid, expected in written.items():
        np.testing.assert_array_equal(_read(run, qid), expected)
    assert verify_run(path).ok


def _sketch_file_schema(value_type: pa.DataType) -> pa.Schema:
    return pa.schema([("question_id", pa.string()), ("turn", pa.int32()), ("position", pa.int32()),
                      ("iteration", pa.int32()), ("layer", pa.int32()), ("top_indices", pa.list_(value_type, K))])


@pytest.mark.parametrize("d", [8, 5376, 65535, 65536, 70000])
def test_the_contract_takes_int32_for_any_d(d) -> None:
    contract.check_shard_schema(Path("x.parquet"), "sketch", _sketch_file_schema(pa.int32()), {"hidden_size": d})


def test_the_contract_takes_uint16_only_below_65536() -> None:
    schema = _sketch_file_schema(pa.uint16())
    contract.check_shard_schema(Path("x.parquet"), "sketch", schema, {"hidden_size": 65535})
    with pytest.raises(CorruptRunError, match=r"x\.parquet column 'top_indices' is .*uint16.*int32.*65536"):
        contract.check_shard_schema(Path("x.parquet"), "sketch", schema, {"hidden_size": 65536})


@pytest.mark.parametrize("value_type", [pa.int64(), pa.int16(), pa.float32()])
def test_the_contract_refuses_other_index_types(value_type) -> None:
    with pytest.raises(CorruptRunError, match="top_indices"):
        contract.check_shard_schema(Path("x.parquet"), "sketch", _sketch_file_schema(value_type),
                                    {"hidden_size": 5376})
