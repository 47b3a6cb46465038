"""Resume, refusal of other runs, crash leftovers, corrupt shards, writer-thread errors and a full disk."""

from __future__ import annotations

import errno
import json
import os

import numpy as np
import pytest

from sst_interp.kernels.errors import UsageError
from sst_interp.store import CorruptRunError, Run, RunWriter
from sst_interp.store import tables as store_tables
from sst_interp.store.codecs import shard_codec


def _open(path, run_settings, **identity_changes):
    identity = dict(run_settings["identity"], **identity_changes)
    return RunWriter.create_or_resume(path, identity, run_settings["extra"]())


def _first_batch(path, run_settings, batch_factory):
    with _open(path, run_settings) as writer:
        writer.write_questions(run_settings["questions"](["a", "b", "c", "d"]))
        writer.submit(1, ["a", "b"], **batch_factory(["a", "b"], 1))
    return path


def test_resume_continues_and_never_duplicates(tmp_path, run_settings, batch_factory):
    path = _first_batch(tmp_path / "run", run_settings, batch_factory)
    with _open(path, run_settings) as writer:
        assert writer.report.resumed
        assert writer.completed(1) == {"a", "b"} and writer.completed(2) == set()
        with pytest.raises(ValueError, match="already recorded"):
            writer.submit(1, ["b", "c"], **batch_factory(["b", "c"], 1))
        writer.submit(1, ["c", "d"], **batch_factory(["c", "d"], 1))
        with pytest.raises(ValueError, match="already recorded"):  # queued but maybe not yet committed
            writer.submit(1, ["d"], **batch_factory(["d"], 1))
        writer.flush()
        assert writer.completed(1) == {"a", "b", "c", "d"}
    run = Run.open(path)
    assert run.question_ids(1) == ["a", "b", "c", "d"]
    assert sorted(run.generations().question_id) == ["a", "b", "c", "d"]
    assert [b.question_id for b in run.hidden(1)] == ["a", "b", "c", "d"]


@pytest.mark.parametrize("change", [{"model": "other"}, {"checkpoint": "ckpt/x"}, {"data": "sha256:def"}])
def test_a_different_identity_is_refused(tmp_path, run_settings, batch_factory, change):
    path = _first_batch(tmp_path / "run", run_settings, batch_factory)
    before = sorted(p.name for p in path.rglob("*"))
    with pytest.raises(UsageError, match="different identity.*pick another --out"):
        _open(path, run_settings, **change)
    assert sorted(p.name for p in path.rglob("*")) == before  # nothing touched


def test_a_different_hidden_size_is_refused(tmp_path, run_settings, batch_factory):
    path = _first_batch(tmp_path / "run", run_settings, batch_factory)
    extra = run_settings["extra"]()
    extra["hidden_size"] = 16
    with pytest.raises(UsageError, match="hidden_size"):
        RunWriter.create_or_resume(path, run_settings["identity"], extra)


def test_a_directory_that_is_not_a_run_is_refused(tmp_path, run_settings):
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"meow")
    with pytest.raises(UsageError, match="not an sst-interp run"):
        _open(other, run_settings)
    assert (other / "cat.jpg").read_bytes() == b"meow"
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(UsageError, match="is a file"):
        _open(afile, run_settings)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "manifest.json").write_text(json.dumps({"name": "something else"}))
    with pytest.raises(UsageError, match="not an sst-interp run"):
        _open(foreign, run_settings)


def test_a_second_writer_on_the_same_run_is_refused(tmp_path, run_settings):
    with _open(tmp_path / "run", run_settings):
        with pytest.raises(UsageError, match="another process"):
            _open(tmp_path / "run", run_settings)


def test_leftovers_of_a_killed_run_are_cleaned_on_resume(tmp_path, run_settings, batch_factory):
    path = _first_batch(tmp_path / "run", run_settings, batch_factory)
    manifest_before = json.loads((path / "manifest.json").read_text())
    # a kill after shards of batch 2 were renamed and generations rewritten, before the manifest was updated:
    batch = batch_factory(["c"], 1)
    layout = manifest_before
    table, present = store_tables.build_shard_table("hidden", batch["hidden"], ["c"], layout)
    store_tables.write_shard(table, present, path / "hidden/depth=1/part-000002.parquet",
                             shard_codec("hidden", layout["dtype"]))
    gens = store_tables.generations_table(batch["generations"], 1, ["c"])
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.concat_tables([pq.read_table(path / "generations.parquet"), gens]),
                   path / "generations.parquet")
    # ... and a half-written temp file
    (path / "logits/depth=1/.part-000002.parquet.tmp-999").write_bytes(b"PAR1 half")
    with _open(path, run_settings) as writer:
        removed = set(writer.report.removed)
        assert "hidden/depth=1/part-000002.parquet" in removed
        assert "logits/depth=1/.part-000002.parquet.tmp-999" in removed
        assert writer.completed(1) == {"a", "b"}
    assert not (path / "hidden/depth=1/part-000002.parquet").exists()
    run = Run.open(path)
    assert sorted(run.generations().question_id) == ["a", "b"]
    assert pq.read_table(path / "generations.parquet").num_rows == 2


def test_truncated_shard_is_detected_and_recovered_by_resume(tmp_path, run_settings, batch_factory):
    path = _first_batch(tmp_path / "run", run_settings, batch_factory)
    shard = path / "sketch/depth=1/part-000001.parquet"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptRunError, match=r"part-000001\.parquet.*rerun the same record command"):
        Run.open(path)
    assert issubclass(CorruptRunError, UsageError)
    with _open(path, run_settings) as writer:  # what the message tells the user to do: resume repairs it
        assert writer.report.damaged == ["sketch/depth=1/part-000001.parquet"]
        assert writer.report.redo == {1: ["a", "b"]}
        assert writer.completed(1) == set()
        writer.submit(1, ["a", "b", "c"], **batch_factory(["a", "b", "c"], 1))
    run = Run.open(path)
    assert run.question_ids(1) == ["a", "b", "c"]
    assert len(run.generations()) == 3
    assert not (path / "hidden/depth=1/part-000001.parquet").exists()  # the dropped batch's other shards


def test_same_size_but_garbled_footer_is_detected(tmp_path, run_settings, batch_factory):
    path = _first_batch(tmp_path / "run", run_settings, batch_factory)
    shard = path / "hidden/depth=1/part-000001.parquet"
    data = bytearray(shard.read_bytes())
    data[-8:-4] = b"\xff\xff\xff\x7f"  # footer length now points outside the file
    shard.write_bytes(bytes(data))
    with pytest.raises(CorruptRunError, match="unreadable Parquet footer"):
        Run.open(path)


def test_writer_thread_error_reaches_the_caller_and_commits_nothing(tmp_path, run_settings, batch_factory):
    path = _first_batch(tmp_path / "run", run_settings, batch_factory)
    bad = batch_factory(["c"], 1)
    bad["hidden"]["values"] = np.zeros((len(bad["hidden"]["values"]), 5), np.float32)  # wrong d
    writer = _open(path, run_settings)
    writer.submit(1, ["c"], **bad)
    with pytest.raises(ValueError, match=r"\[N, 8\]"):
        writer.flush()
    with pytest.raises(ValueError, match=r"\[N, 8\]"):
        writer.submit(1, ["d"], **batch_factory(["d"], 1))
    with pytest.raises(ValueError, match=r"\[N, 8\]"):
        writer.close()
    assert Run.open(path).question_ids(1) == ["a", "b"]


def test_body_exception_wins_and_writer_error_is_attached(tmp_path, run_settings, batch_factory):
    bad = batch_factory(["c"], 1)
    bad["logits"]["top_ids"] = bad["logits"]["top_ids"][:, :2]  # top_k mismatch
    with pytest.raises(KeyError) as info:
        with _open(tmp_path / "run", run_settings) as writer:
            writer.submit(1, ["c"], **bad)
            writer._queue.join()
            raise KeyError("body")
    assert any("run writer also failed" in note for note in info.value.__notes__)


def test_full_disk_is_a_usage_error_and_completed_work_stays(tmp_path, run_settings, batch_factory, monkeypatch):
    path = _first_batch(tmp_path / "run", run_settings, batch_factory)
    real = store_tables.write_shard
    calls = []

    def full_after_one(table, present, final, codec):
        calls.append(final)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(final))
        return real(table, present, final, codec)

    monkeypatch.setattr(store_tables, "write_shard", full_after_one)
    writer = _open(path, run_settings)
    writer.submit(1, ["c", "d"], **batch_factory(["c", "d"], 1))
    with pytest.raises(UsageError, match="disk full.*rerun the same command"):
        writer.close()
    monkeypatch.setattr(store_tables, "write_shard", real)
    assert Run.open(path).question_ids(1) == ["a", "b"]
    with _open(path, run_settings) as writer:  # resume after space was freed
        assert "hidden/depth=1/part-000002.parquet" in writer.report.removed
        writer.submit(1, ["c", "d"], **batch_factory(["c", "d"], 1))
    assert Run.open(path).question_ids(1) == ["a", "b", "c", "d"]


def test_manifest_is_rewritten_atomically_per_batch(tmp_path, run_settings, batch_factory, monkeypatch):
    from sst_interp.store import manifest as mf

    path = tmp_path / "run"
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        if str(dst).endswith("manifest.json"):
            seen.append(json.loads(open(src).read())["status"])
        return real_replace(src, dst)

    monkeypatch.setattr(mf.os, "replace", spy)
    with _open(path, run_settings) as writer:
        writer.submit(2, ["x"], **batch_factory(["x"], 2))
        writer.submit(2, ["y"], **batch_factory(["y"], 2))
    assert seen == [{}, {"2": ["x"]}, {"2": ["x", "y"]}]
    assert not [p for p in path.rglob("*") if ".tmp-" in p.name]


def test_check_out_touches_nothing(tmp_path, run_settings, batch_factory):
    from sst_interp.store import check_out

    assert check_out(tmp_path / "absent", run_settings["identity"]) is False
    assert not (tmp_path / "absent").exists()
    path = _first_batch(tmp_path / "run", run_settings, batch_factory)
    before = {p: p.stat().st_mtime_ns for p in path.rglob("*")}
    assert check_out(path, run_settings["identity"]) is True
    with pytest.raises(UsageError, match="different identity"):
        check_out(path, dict(run_settings["identity"], model="other"))
    assert {p: p.stat().st_mtime_ns for p in path.rglob("*")} == before
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x").write_text("x")
    with pytest.raises(UsageError, match="not an sst-interp run"):
        check_out(tmp_path / "junk", run_settings["identity"])
