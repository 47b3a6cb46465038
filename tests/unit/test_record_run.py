"""record end to end on a tiny random model: contents, determinism, resume, refusal, corrupt shards."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sst_interp.cli.record import main, run as record_run
from sst_interp.store import CorruptRunError, Run
from tests.unit.conftest import FAST, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {"gemma": save_tiny_model(root / "gemma"), "llama": save_tiny_model(root / "llama", "llama")}


def _argv(model, out, limit=3):
    return FAST + ["--model", str(model), "--out", str(out), "--depths", "1,2", "--limit", str(limit),
                   "--batch-size", "2", "--demo-preset"]


def test_run_contents_match_the_generations(models, tmp_path, capsys):
    out = tmp_path / "run"
    accuracy = record_run(_argv(models["gemma"], out))
    assert set(accuracy) == {1, 2}
    printed = capsys.readouterr().out
    assert "demo preset" in printed and "staged capacity" in printed and f"run: {out}" in printed
    assert "disk: ~" in printed
    run = Run.open(out)
    assert run.depths == [1, 2] and run.num_layers == 3 and run.hidden_size == 32
    assert run.manifest["sketch_k"] == 6  # round(32 * 1024 / 5376)
    assert run.manifest["prompt_mode"] == "none" and run.manifest["sst"]["state_scale"] == "hidden"  # demo preset
    ids = run.question_ids()
    assert ids == ["demo-000", "demo-001", "demo-002"]
    gens = run.generations().set_index(["question_id", "depth"])
    assert len(gens) == 6 and not gens.index.duplicated().any()
    for depth in (1, 2):
        for block in run.logits(depth):
            tokens = list(gens.loc[(block.question_id, depth), "token_ids"])
            # the final iteration's argmax at position p is generated token p (position 0 = the first token)
            assert block.argmax[:, -1].tolist() == tokens[: len(block.positions)]
            assert block.iterations.tolist() == list(range(1, depth + 1))
        for block in run.hidden(depth):
            n = int(gens.loc[(block.question_id, depth), "n_tokens"])
            assert block.positions.tolist() == list(range(min(n, 2)))
            assert block.values.shape[1:] == (depth, 3, 32) and np.isfinite(block.values).all()
    assert (gens["chosen_depth"] == gens.index.get_level_values("depth")).all()
    correct = run.generations().groupby("depth")["correct"].mean().to_dict()
    assert accuracy == pytest.approx({d: correct[d] for d in (1, 2)})


def test_same_command_gives_identical_arrays(models, tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    main(_argv(models["gemma"], first))
    main(_argv(models["gemma"], second))
    a, b = Run.open(first), Run.open(second)
    assert a.generations().token_ids.map(list).tolist() == b.generations().token_ids.map(list).tolist()
    for x, y in zip(a.hidden(2), b.hidden(2)):
        assert x.question_id == y.question_id and np.array_equal(x.values.view(np.uint32), y.values.view(np.uint32))
    for x, y in zip(a.sketch(2), b.sketch(2)):
        assert np.array_equal(x.top_indices, y.top_indices)


def test_rerun_resumes_extends_and_refuses_another_model(models, tmp_path, capsys):
    out = tmp_path / "run"
    main(_argv(models["gemma"], out))
    manifest = json.loads((out / "manifest.json").read_text())
    capsys.readouterr()
    main(_argv(models["gemma"], out))  # nothing left to do
    assert "6 of 6 question-depths already recorded" in capsys.readouterr().out
    assert json.loads((out / "manifest.json").read_text())["batches"] == manifest["batches"]
    main(_argv(models["gemma"], out, limit=4))
    run = Run.open(out)
    assert run.question_ids(1) == run.question_ids(2) == ["demo-000", "demo-001", "demo-002", "demo-003"]
    assert len(run.generations()) == 8
    with pytest.raises(SystemExit) as info:
        main(_argv(models["llama"], out))
    assert info.value.code == 2
    assert "different identity" in capsys.readouterr().err
    assert Run.open(out).question_ids(1) == run.question_ids(1)


def test_corrupt_shard_is_named_and_repaired_by_the_same_command(models, tmp_path, capsys):
    out = tmp_path / "run"
    main(_argv(models["gemma"], out))
    shard = sorted((out / "hidden" / "depth=2").glob("*.parquet"))[0]
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(CorruptRunError, match=shard.name):
        Run.open(out)
    capsys.readouterr()
    main(_argv(models["gemma"], out))  # the same command re-records the truncated shard's batch
    said = capsys.readouterr().out
    assert shard.relative_to(out).as_posix() in said and "recorded again" in said
    run = Run.open(out)
    assert run.question_ids(2) == ["demo-000", "demo-001", "demo-002"]
    gens = run.generations()
    assert len(gens) == 6 and not gens.duplicated(["question_id", "depth"]).any()
    assert sorted(b.question_id for b in run.hidden(2)) == ["demo-000", "demo-001", "demo-002"]
