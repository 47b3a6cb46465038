"""Consistency (issue 26): a manifest edited or damaged so that it disagrees with intact shards is found by verify
(exit 1, naming manifest.json) and refused by Run.open; a block recorded twice is found and named; rerunning
record reconciles the manifest with the files; a lost manifest is rebuilt from the files and verifies."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sst_interp.store import CorruptRunError, Run, RunWriter
from sst_interp.store import resume as resume_module
from sst_interp.cli.store import main as store_main
from tests.unit.store.conftest import IDENTITY
from tests.unit.store.test_store_integrity import _batch, _settings, write_run


def _edit(path: Path, change) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    change(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


def _drop(depth: str, qid: str):
    def change(m):
        m["status"][depth].remove(qid)
    return change


#: manifest edits after which the manifest disagrees with its (intact) shards
EDITS = {
    "num_layers": lambda m: m.update(num_layers=m["num_layers"] + 1),
    "hidden_size": lambda m: m.update(hidden_size=m["hidden_size"] * 2),
    "top_k": lambda m: m.update(top_k=m["top_k"] + 1),
    "dtype": lambda m: m.update(dtype="bfloat16"),
    "extra_depth": lambda m: m.update(depths=m["depths"] + [3]),
    "status_without_shards": lambda m: m["status"]["1"].append("z"),
    "status_drops_a_listed_question": _drop("1", "a"),
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return write_run(tmp_path_factory.mktemp("consistency") / "run")


def _copy(pristine: Path, tmp_path: Path) -> Path:
    path = tmp_path / "run"
    shutil.copytree(pristine, path)
    return path


def _contents(path: Path) -> dict:
    """Everything a reader sees: the tables and every block of every kind, as plain values."""
    run = Run.open(path)
    out = {"questions": run.questions(), "generations": run.generations(), "episodes": run.episodes()}
    for depth in run.depths:
        for kind in ("hidden", "logits", "sketch", "gates"):
            out[f"{kind}{depth}"] = [{k: v for k, v in vars(b).items()} for b in getattr(run, kind)(depth)]
    return out


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], pd.DataFrame):  # row order is not part of the contract (a re-recorded batch appends)
            by = [c for c in ("question_id", "depth", "turn") if c in a[key].columns]
            pd.testing.assert_frame_equal(a[key].sort_values(by).reset_index(drop=True),
                                          b[key].sort_values(by).reset_index(drop=True))
            continue
        assert len(a[key]) == len(b[key]) > 0, key
        for block_a, block_b in zip(a[key], b[key]):
            for name, value in block_a.items():
                np.testing.assert_array_equal(value, block_b[name], err_msg=f"{key} {name}")


def _verify(path: Path, capsys) -> tuple[int, str, str]:
    code = store_main(["verify", str(path)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("edit", list(EDITS))
def test_verify_names_the_manifest_when_it_disagrees_with_the_shards(pristine, tmp_path, capsys, edit):
    path = _copy(pristine, tmp_path)
    assert _verify(path, capsys)[0] == 0
    _edit(path, EDITS[edit])
    code, out, err = _verify(path, capsys)
    assert code == 1, out
    assert "inconsistent: manifest.json:" in out and "damaged:" not in out  # the shards are not blamed
    assert len(err.strip().splitlines()) == 1 and err.startswith("error:") and "store repair" in err
    with pytest.raises(CorruptRunError, match=r"manifest.json disagrees with the run: .*store repair") as info:
        Run.open(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("edit", list(EDITS))
def test_repair_rebuilds_an_edited_manifest_to_the_original(pristine, tmp_path, capsys, edit):
    path = _copy(pristine, tmp_path)
    original = json.loads((path / "manifest.json").read_text())
    _edit(path, EDITS[edit])
    assert store_main(["repair", str(path)]) == 0
    assert _verify(path, capsys)[0] == 0
    assert json.loads((path / "manifest.json").read_text()) == original
    _assert_same(_contents(path), _contents(pristine))


@pytest.mark.parametrize("edit", list(EDITS))
def test_rerunning_record_reconciles_an_edited_manifest_without_recording_twice(pristine, tmp_path, capsys, edit):
    path = _copy(pristine, tmp_path)
    _edit(path, EDITS[edit])
    with RunWriter.create_or_resume(path, IDENTITY, _settings()) as writer:
        # an extra depth is dropped from the depths this command asks for, not by reconciling
        assert (writer.report.reconciled or edit == "extra_depth") and not writer.report.redo.get(2)
        assert writer.report.redo.get(1, []) in ([], ["z"])  # nothing recorded is recorded again
        assert writer.completed(1) == writer.completed(2) == {"a", "b", "c", "d"}
    assert _verify(path, capsys)[0] == 0
    _assert_same(_contents(path), _contents(pristine))


def _duplicated_run(pristine: Path, tmp_path: Path, monkeypatch) -> Path:
    """What a rerun did before reconciliation: status lost a and b at depth 1 while batch 1 still held them, and
    the rerun recorded them again as a new batch."""
    path = _copy(pristine, tmp_path)
    _edit(path, lambda m: (_drop("1", "a")(m), _drop("1", "b")(m)))
    with monkeypatch.context() as patch:
        patch.setattr(resume_module, "reconcile", lambda *args: [])
        with RunWriter.create_or_resume(path, IDENTITY, _settings()) as writer:
            writer.submit(1, ["a", "b"], **_batch(["a", "b"], 1))
    return path


def test_a_block_recorded_twice_is_found_and_the_copy_named(pristine, tmp_path, capsys, monkeypatch):
    path = _duplicated_run(pristine, tmp_path, monkeypatch)
    code, out, err = _verify(path, capsys)
    assert code == 1
    for kind in ("hidden", "logits", "sketch", "gates"):
        assert f"inconsistent: {kind}/depth=1/part-000004.parquet:" in out and "repeat" in out
    assert "inconsistent: manifest.json: batches 1 and 4 both hold question 'a' at depth 1" in out
    with pytest.raises(CorruptRunError, match=r"disagrees with the run: batches 1 and 4 both hold question 'a'"):
        Run.open(path)


def test_rerunning_record_drops_the_copy_of_a_batch(pristine, tmp_path, capsys, monkeypatch):
    path = _duplicated_run(pristine, tmp_path, monkeypatch)
    with RunWriter.create_or_resume(path, IDENTITY, _settings()) as writer:
        assert not writer.report.redo and writer.completed(1) == {"a", "b", "c", "d"}
        assert "hidden/depth=1/part-000004.parquet" in writer.report.removed
    assert _verify(path, capsys)[0] == 0
    _assert_same(_contents(path), _contents(pristine))


def test_a_deleted_manifest_is_rebuilt_and_the_run_is_unchanged(pristine, tmp_path, capsys):
    path = _copy(pristine, tmp_path)
    original = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").unlink()
    code, out, err = _verify(path, capsys)
    assert code == 1 and "damaged: manifest.json: missing" in out and f"store repair {path}" in err
    with pytest.raises(CorruptRunError, match="manifest.json is missing; python -m sst_interp.store repair"):
        Run.open(path)
    assert store_main(["repair", str(path)]) == 0
    assert "repaired:" in capsys.readouterr().out
    assert _verify(path, capsys)[0] == 0
    assert json.loads((path / "manifest.json").read_text()) == original
    _assert_same(_contents(path), _contents(pristine))


def test_verify_without_a_manifest_names_it_in_one_correct_line(pristine, tmp_path, capsys):
    """Issue 32, 5: a deleted manifest read "1 of 0 files ... are damaged"; the shards are still checked."""
    path = _copy(pristine, tmp_path)
    (path / "manifest.json").unlink()
    code, out, err = _verify(path, capsys)
    advice = f"python -m sst_interp.store repair {path} rebuilds manifest.json from the shards and tables"
    assert code == 1 and err == (f"error: manifest.json of {path} is missing, while the run's shards and tables are "
                                 f"there; {advice}\n")
    shard = sorted((path / "hidden").rglob("*.parquet"))[0]
    shard.write_bytes(shard.read_bytes()[:100])
    files = len(list(path.rglob("*.parquet")))
    code, out, err = _verify(path, capsys)
    assert code == 1 and f"damaged: {shard.relative_to(path).as_posix()}:" in out
    assert err == (f"error: manifest.json of {path} is missing, while the run's shards and tables are there and 1 "
                   f"of {files} files of {path} are damaged; {advice}\n")


@pytest.mark.parametrize("repair", ["rerun", "store-repair"])
def test_a_depth_claimed_without_shards_is_repaired_to_the_clean_manifest_byte_for_byte(pristine, tmp_path, repair):
    """Issue 32, 4: a manifest edited to claim a depth nothing was recorded at kept an empty ``'3': []`` status
    entry after the rerun, so the repaired run was not byte-equal to the clean one."""
    path = _copy(pristine, tmp_path)
    _edit(path, lambda m: (m["status"].update({"3": ["a", "b"]}), m.update(depths=m["depths"] + [3])))
    if repair == "rerun":
        with RunWriter.create_or_resume(path, IDENTITY, _settings()) as writer:
            assert writer.report.redo == {3: ["a", "b"]}
            assert writer.completed(1) == writer.completed(2) == {"a", "b", "c", "d"}
    else:
        assert store_main(["repair", str(path)]) == 0
    assert (path / "manifest.json").read_bytes() == (pristine / "manifest.json").read_bytes()


def test_rerunning_record_rebuilds_an_unreadable_manifest(pristine, tmp_path, capsys):
    path = _copy(pristine, tmp_path)
    (path / "manifest.json").write_text('{"schema_version": 1, "sta')
    with RunWriter.create_or_resume(path, IDENTITY, _settings()) as writer:
        assert any("rebuilt" in line for line in writer.report.reconciled)
        assert writer.completed(1) == writer.completed(2) == {"a", "b", "c", "d"}
    assert _verify(path, capsys)[0] == 0
    _assert_same(_contents(path), _contents(pristine))


def test_repair_without_stamped_files_is_one_line_and_removes_nothing(pristine, tmp_path, capsys):
    import pyarrow.parquet as pq

    path = _copy(pristine, tmp_path)
    (path / "manifest.json").unlink()
    for target in path.rglob("*.parquet"):  # as a run written before the stamp, or by another tool
        table = pq.read_table(target)
        metadata = {k: v for k, v in (table.schema.metadata or {}).items() if k != b"sst_interp.run"}
        pq.write_table(table.replace_schema_metadata(metadata), target)
    before = sorted(p.relative_to(path).as_posix() for p in path.rglob("*"))
    with pytest.raises(SystemExit) as info:
        store_main(["repair", str(path)])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot rebuild the manifest")
    assert sorted(p.relative_to(path).as_posix() for p in path.rglob("*")) == before
