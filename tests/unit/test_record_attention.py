"""``record --attention LAYERS[:HEADS]`` end to end on tiny models: the ``attention/`` shards (checksummed, verified,
read tidy by ``Run.attention`` and ``study.open(run)``), the same tokens and states as without the flag, a run without
it exactly as before, and the bad inputs (one ``error:`` line, exit 2, nothing written)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sst_interp import study
from sst_interp.cli.record import main as record_main
from sst_interp.store import Run
from sst_interp.store.verify import verify_run
from tests.unit.conftest import FAST, fails_with_one_error_line, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

#: The manifest and identity keys of a run recorded with these flags before --attention existed (main at 5b1674f).
BEFORE_MANIFEST = ["batch_size", "batches", "decoding", "demo_preset", "depth_policy", "depths", "device", "device_map",
                   "dtype", "ffn_size", "full_positions", "gates", "hidden_size", "identity", "logits_every_iteration",
                   "next_batch", "num_layers", "package_version", "prompt_mode", "protocol", "questions",
                   "schema_version", "sketch_k", "sketch_positions", "sst", "status", "tables", "top_k", "vocab_size"]
BEFORE_IDENTITY = ["batch_size", "checkpoint", "data_sha256", "decoding", "dtype", "full_positions", "gates",
                   "max_new_tokens", "model", "numerics", "prompt_mode", "questions", "sketch_k", "sketch_positions",
                   "state_scale", "top_k"]
BEFORE_FILES = [".lock", "generations.parquet", "hidden/depth=1/part-000001.parquet",
                "hidden/depth=2/part-000002.parquet", "logits/depth=1/part-000001.parquet",
                "logits/depth=2/part-000002.parquet", "manifest.json", "questions.parquet",
                "sketch/depth=1/part-000001.parquet", "sketch/depth=2/part-000002.parquet"]


def _argv(model: Path, out: Path, *extra: str) -> list[str]:
    return [*FAST, "--model", str(model), "--out", str(out), "--depths", "1,2", "--limit", "2", "--batch-size", "2",
            *extra]


@pytest.fixture(scope="module")
def gemma(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("gemma") / "model")


@pytest.fixture(scope="module")
def runs(gemma: Path, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    out = {"plain": root / "plain", "attention": root / "attention"}
    assert record_main(_argv(gemma, out["plain"], "--demo-preset")) == 0
    assert record_main(_argv(gemma, out["attention"], "--demo-preset", "--attention", "0,2:1")) == 0
    return out


def test_a_run_without_attention_is_as_before(runs: dict[str, Path]) -> None:
    out = runs["plain"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(manifest) == BEFORE_MANIFEST and sorted(manifest["identity"]) == BEFORE_IDENTITY
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == BEFORE_FILES
    reason = study.open(out).available().set_index("measurement").loc["attention"]
    assert not reason["available"] and "--attention" in reason["reason"]


def test_attention_shards_are_checksummed_verified_and_read_tidy(gemma: Path, runs: dict[str, Path]) -> None:
    out = runs["attention"]
    config = json.loads((gemma / "config.json").read_text())
    run = Run.open(out)
    assert run.manifest["attention"]["layers"] == [0, 2] and run.manifest["attention"]["heads"] == [1]
    assert run.manifest["identity"]["attention"] == {"layers": [0, 2], "heads": [1], "top_k": None}
    for batches in run.manifest["batches"].values():
        for batch in batches:
            entry = batch["shards"]["attention"]
            assert hashlib.sha256((out / entry["file"]).read_bytes()).hexdigest() == entry["sha256"]
    assert verify_run(out).ok
    rows = run.attention()
    assert set(rows["layer"]) == {0, 2} and set(rows["head"]) == {1}
    gens = run.generations().set_index(["question_id", "depth"])
    prompts = {q: len(p) + 1 for q, p in run.questions().set_index("question_id")["prompt"].items()}  # <bos> + chars
    for (qid, depth, position, iteration, layer), part in rows.groupby(
            ["question_id", "depth", "position", "iteration", "layer"]):
        assert 1 <= iteration <= depth and position < min(2, gens.loc[(qid, depth), "n_tokens"])
        # every key the query sees: its context up to itself, the last sliding_window of it in a sliding layer
        end = prompts[qid] + position
        seen = min(end, config["sliding_window"]) if config["layer_types"][layer] == "sliding_attention" else end
        assert part["key_position"].tolist() == list(range(end - seen, end))
        assert part["weight"].sum() == pytest.approx(1.0, abs=1e-5)
    analysis = study.open(out)
    assert analysis.attention().equals(rows)
    table = analysis.table("attention")
    assert set(table["layer"]) == {0, 2} and (table["remaining_mass_mean"].abs() < 1e-5).all()


def test_a_damaged_attention_shard_fails_verification(runs: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(runs["attention"], copy)
    shard = sorted((copy / "attention").rglob("*.parquet"))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 3] ^= 0xFF
    shard.write_bytes(bytes(data))
    report = verify_run(copy)
    assert [rel for rel, _ in report.damaged] == [shard.relative_to(copy).as_posix()]


def test_recording_attention_changes_no_token_and_no_state(runs: dict[str, Path]) -> None:
    plain, recorded = Run.open(runs["plain"]), Run.open(runs["attention"])
    columns = ["question_id", "depth", "token_ids", "text"]
    pd.testing.assert_frame_equal(plain.generations()[columns], recorded.generations()[columns])
    for depth in (1, 2):
        for a, b in zip(plain.hidden(depth), recorded.hidden(depth)):
            assert a.question_id == b.question_id and np.array_equal(a.values, b.values)
        for a, b in zip(plain.logits(depth), recorded.logits(depth)):
            assert np.array_equal(a.top_logprobs, b.top_logprobs)


def test_a_resume_with_other_attention_is_refused(gemma: Path, runs: dict[str, Path], capsys) -> None:
    fails_with_one_error_line(capsys, record_main, _argv(gemma, runs["attention"], "--demo-preset", "--attention",
                                                         "all"), "attention")


@pytest.mark.parametrize("flags, phrase", [
    (["--attention", "3"], "--attention asks for layer 3, but the sst model's recorded layers are 0..2"),
    (["--attention", "0-1:2"], "--attention asks for head 2, but layer 0's attention has 2 heads (0..1)"),
    (["--attention", "1:x"], "--attention heads 'x' is not a list of indices"),
    (["--attention", "2-1"], "is not an index >= 0 or a range low-high"),
    (["--attention-top-k", "4"], "--attention-top-k applies to --attention"),
    (["--attention", "all", "--attention-top-k", "0"], "--attention-top-k must be at least 1"),
    (["--attention", "all", "--compile", "on"], "cannot record --attention"),
])
def test_bad_attention_is_one_error_line_and_writes_nothing(gemma: Path, tmp_path: Path, capsys, flags, phrase):
    out = tmp_path / "out"
    fails_with_one_error_line(capsys, record_main, _argv(gemma, out, "--demo-preset", *flags), phrase)
    assert not out.exists()


@pytest.mark.parametrize("flags, phrase", [
    (["--attention", "6"], "--attention asks for layer 6, but the hrm_text model's recorded layers are 0..5"),
    (["--attention", "all:2"], "--attention asks for head 2, but HrmTextDecoderLayer's attention has 2 heads"),
])
def test_a_layer_or_head_a_looped_family_lacks_is_one_error_line(tmp_path: Path, capsys, flags, phrase) -> None:
    folder = save_tiny_model(tmp_path / "hrm", "hrm_text")
    out = tmp_path / "out"
    fails_with_one_error_line(capsys, record_main, _argv(folder, out, *flags), phrase)
    assert not out.exists()


def test_a_looped_family_records_its_top_k_keys(tmp_path: Path) -> None:
    folder = save_tiny_model(tmp_path / "hrm", "hrm_text")
    out = tmp_path / "run"
    assert record_main(_argv(folder, out, "--attention", "all", "--attention-top-k", "3")) == 0
    rows = Run.open(out).attention()
    per_query = rows.groupby(["question_id", "depth", "position", "iteration", "layer", "head"])
    assert per_query.size().max() == 3 and set(rows["layer"]) == set(range(6))
    assert set(rows.loc[rows["depth"] == 2, "iteration"]) == {1, 2}
    mass = per_query.agg(kept=("weight", "sum"), rest=("remaining_mass", "first"))
    assert np.allclose(mass["kept"] + mass["rest"], 1.0, atol=1e-5) and (mass["rest"] > -1e-6).all()
