"""Integrity: 64 flipped bytes inside a data page of a hidden, logits or sketch shard, generations.parquet or
episodes.parquet are refused by the reader, report, probe and verify with one line naming the file, and resume
re-records the damaged batch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from sst_interp.store import CorruptRunError, Run, RunWriter
from sst_interp.store import codecs
from sst_interp.cli.store import main as store_main
from sst_interp.store.codecs import Codec
from tests.unit.store.conftest import IDENTITY, extra, make_batch, planted_value, question_frame

#: (file, column whose data page is hit)
TARGETS = {
    "hidden": ("hidden/depth=1/part-000001.parquet", "values"),
    "logits": ("logits/depth=1/part-000001.parquet", "top_logprobs"),
    "sketch": ("sketch/depth=1/part-000001.parquet", "top_indices"),
    "generations": ("generations.parquet", "text"),
    "episodes": ("episodes.parquet", "final_answer"),
}


def flip_page(target: Path, column: str, n: int = 64) -> None:
    """XOR ``n`` bytes in the middle of the body of ``column``'s first page in row group 0: the dictionary page of
    a dictionary-encoded column (where its values are), else the data page. Page headers sit at the start of a
    page and carry page statistics, which no read uses (only sha256 covers them), so the bytes hit lie past them.
    """
    meta = pq.read_metadata(target)
    index = meta.schema.to_arrow_schema().get_field_index(column)
    chunk = meta.row_group(0).column(index)
    if chunk.dictionary_page_offset:
        start, end = chunk.dictionary_page_offset, chunk.data_page_offset
    else:
        start, end = chunk.data_page_offset, chunk.data_page_offset + chunk.total_compressed_size
    n = min(n, (end - start) // 3)
    middle = (start + end) // 2 + (end - start) // 8 - n // 2
    data = bytearray(target.read_bytes())
    for i in range(middle, middle + n):
        data[i] ^= 0xFF
    target.write_bytes(bytes(data))


def _text(seed: str) -> str:
    """600 letters that do not compress (so a column's page body is long enough to hit its middle)."""
    rng = np.random.default_rng(sum(map(ord, seed)))
    return "".join(chr(c) for c in rng.integers(97, 123, size=600))


def _episodes(ids, depth):
    return [{"question_id": q, "depth": depth, "n_turns": 1, "stop_reason": "finish_session",
             "final_answer": _text(f"{q}{depth}"), "correct": True, "grader": "exact", "depth_policy": "fixed",
             "chosen_depth": depth} for q in ids]


def _batch(ids, depth):
    batch = make_batch(ids, depth, positions=8)
    for row in batch["generations"]:
        row["text"] = _text(f"{row['question_id']}{depth}")
    return dict(batch, episodes=_episodes(ids, depth))


def _settings():
    return dict(extra(), protocol="codeact", prompt_mode="two_pass")


def write_run(path: Path) -> Path:
    with RunWriter.create_or_resume(path, IDENTITY, _settings()) as writer:
        writer.write_questions(question_frame(["a", "b", "c", "d"]))
        writer.submit(1, ["a", "b"], **_batch(["a", "b"], 1))
        writer.submit(1, ["c", "d"], **_batch(["c", "d"], 1))
        writer.submit(2, ["a", "b", "c", "d"], **_batch(["a", "b", "c", "d"], 2))
    return path


def _read_everything(run: Run) -> None:
    run.generations(), run.episodes()
    for depth in run.depths:
        for kind in ("hidden", "logits", "sketch", "gates"):
            list(getattr(run, kind)(depth))


def test_every_file_is_written_with_page_checksums_and_a_recorded_sha256(tmp_path):
    path = write_run(tmp_path / "run")
    manifest = json.loads((path / "manifest.json").read_text())
    shards = [s for batches in manifest["batches"].values() for b in batches for s in b["shards"].values()]
    assert len(shards) == 12 and all(len(s["sha256"]) == 64 for s in shards)
    assert set(manifest["tables"]) == {"questions.parquet", "generations.parquet", "episodes.parquet"}
    # one row group per batch in the tables, so damage stays confined to one batch
    assert pq.read_metadata(path / "generations.parquet").num_row_groups == 3
    assert store_main(["verify", str(path)]) == 0


def test_a_flip_passes_silently_without_page_checksums(tmp_path, monkeypatch):
    """What the issue measured: without verification the changed values are returned (so the tests below
    exercise the checksums, not some other failure). Written uncompressed: a flip inside a zstd page usually also
    breaks decompression, but no codec promises that (none, snappy and lz4 decode changed bytes), and the page CRC,
    checked before a page is decompressed, covers every codec."""
    monkeypatch.setattr(codecs, "SHARD_CODECS", {key: Codec("none") for key in codecs.SHARD_CODECS})
    path = write_run(tmp_path / "run")
    assert pq.ParquetFile(path / TARGETS["hidden"][0]).metadata.row_group(0).column(5).compression == "UNCOMPRESSED"
    target = path / TARGETS["hidden"][0]
    before = pq.read_table(target).column("values").to_pylist()
    flip_page(target, "values")
    after = pq.read_table(target).column("values").to_pylist()
    assert before != after


@pytest.mark.parametrize("kind", list(TARGETS))
def test_the_reader_refuses_a_flipped_page_naming_the_file(tmp_path, kind):
    path = write_run(tmp_path / "run")
    rel, column = TARGETS[kind]
    flip_page(path / rel, column)
    run = Run.open(path)  # open reads footers only; the damaged page is caught when it is read
    with pytest.raises(CorruptRunError, match=rf"{path / rel} is damaged") as info:
        _read_everything(run)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("kind", list(TARGETS))
def test_verify_lists_the_damaged_file_and_exits_1(tmp_path, kind, capsys):
    path = write_run(tmp_path / "run")
    rel, column = TARGETS[kind]
    flip_page(path / rel, column)
    assert store_main(["verify", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"damaged: {rel}: " + out.split(": ", 2)[2].splitlines()[0]]
    assert "sha256 differs" in out and len(err.strip().splitlines()) == 1 and err.startswith("error: 1 of 15 files")


def test_verify_catches_a_flip_outside_any_page_by_sha256(tmp_path, capsys):
    path = write_run(tmp_path / "run")
    target = path / TARGETS["hidden"][0]
    data = bytearray(target.read_bytes())
    data[2] ^= 0x01  # inside the "PAR1" magic's neighbourhood: no page covers it
    target.write_bytes(bytes(data))
    assert store_main(["verify", str(path)]) == 1
    assert "sha256 differs" in capsys.readouterr().out


def test_verify_bad_input_is_one_line_exit_2(tmp_path, capsys):
    for bad in (tmp_path / "absent", tmp_path):
        with pytest.raises(SystemExit) as info:
            store_main(["verify", str(bad)])
        assert info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:")


@pytest.mark.parametrize("kind", ["hidden", "logits", "sketch"])
def test_resume_re_records_the_batch_of_a_damaged_shard(tmp_path, kind):
    path = write_run(tmp_path / "run")
    rel, column = TARGETS[kind]
    flip_page(path / rel, column)
    with RunWriter.create_or_resume(path, IDENTITY, _settings()) as writer:
        assert writer.report.damaged == [rel]
        assert writer.report.redo == {1: ["a", "b"]}
        assert writer.completed(1) == {"c", "d"} and writer.completed(2) == {"a", "b", "c", "d"}
        writer.submit(1, ["a", "b"], **_batch(["a", "b"], 1))
    assert store_main(["verify", str(path)]) == 0
    run = Run.open(path)
    assert run.question_ids(1) == ["a", "b", "c", "d"]
    for block in run.hidden(1):
        np.testing.assert_array_equal(block.values[3, 0, 1], planted_value(block.question_id, 1, 0, 3, 1, 1))
    _read_everything(run)


@pytest.mark.parametrize("kind", ["generations", "episodes"])
def test_resume_keeps_the_undamaged_batches_of_a_damaged_table(tmp_path, kind):
    path = write_run(tmp_path / "run")
    rel, column = TARGETS[kind]
    flip_page(path / rel, column)  # row group 0: the first batch (depth 1: a, b)
    with RunWriter.create_or_resume(path, IDENTITY, _settings()) as writer:
        assert writer.report.damaged == [rel]
        assert writer.report.redo == {1: ["a", "b"]}
        assert writer.completed(1) == {"c", "d"} and writer.completed(2) == {"a", "b", "c", "d"}
        writer.submit(1, ["a", "b"], **_batch(["a", "b"], 1))
    assert store_main(["verify", str(path)]) == 0
    run = Run.open(path)
    _read_everything(run)
    assert sorted(zip(run.episodes().question_id, run.episodes().depth)) == sorted(
        (q, d) for q in "abcd" for d in (1, 2))
    assert len(run.generations()) == 8


def test_resume_re_writes_a_damaged_questions_table(tmp_path):
    path = write_run(tmp_path / "run")
    flip_page(path / "questions.parquet", "prompt", n=4)
    with RunWriter.create_or_resume(path, IDENTITY, _settings()) as writer:
        assert writer.report.damaged == ["questions.parquet"] and not writer.report.redo
        writer.write_questions(question_frame(["a", "b", "c", "d"]))
    assert store_main(["verify", str(path)]) == 0
    assert Run.open(path).question_ids(1) == ["a", "b", "c", "d"]


def test_a_table_an_earlier_version_blessed_is_refused_on_open_and_rebuilt_on_resume(tmp_path):
    """A table whose damaged pandas metadata was rewritten (into both footer copies) and hashed again, as before
    issue 49: its sha256 matches, so only the footer check sees it. Readers refuse it in one line; resume rebuilds
    it from its rows under a new footer."""

    from sst_interp.store import integrity

    path = write_run(tmp_path / "run")
    target = path / "episodes.parquet"
    table = pq.read_table(target)
    rows = table.to_pylist()
    blessed = table.replace_schema_metadata({**table.schema.metadata, b"pandas": b'{"columns": "\xff\xfe"}'})
    groups = [pq.read_metadata(target).row_group(i).num_rows for i in range(3)]
    with pq.ParquetWriter(target, blessed.schema, write_page_checksum=True) as writer:
        start = 0
        for size in groups:
            writer.write_table(blessed.slice(start, size), row_group_size=size)
            start += size
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["tables"]["episodes.parquet"] = {"bytes": target.stat().st_size, "sha256": integrity.sha256_file(target)}
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UnicodeDecodeError):
        pq.read_table(target).to_pandas()  # what summary and report crashed on
    with pytest.raises(CorruptRunError, match=rf"{target} is damaged .*pandas metadata.*store repair {path}") as info:
        Run.open(path)
    assert "\n" not in str(info.value)
    assert not store_main(["verify", str(path)]) == 0
    with RunWriter.create_or_resume(path, IDENTITY, _settings()) as writer:
        assert writer.report.damaged == ["episodes.parquet"] and writer.report.rebuilt == ["episodes.parquet"]
        assert not writer.report.redo  # every row verified: nothing to record again
    assert store_main(["verify", str(path)]) == 0
    assert pq.read_table(target).to_pylist() == rows and b"pandas" not in pq.read_metadata(target).metadata
    assert len(Run.open(path).episodes()) == 8
