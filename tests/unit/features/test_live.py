"""The live source (features.live): the organism's states at every position, equal to the recorder's at the answer
column, and ``train --live`` writing a dictionary whose sidecar names its source."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from sst_interp.cli.features import main as features_main
from sst_interp.cli.record import main as record_main
from sst_interp.features.live import LiveBatches, live_states
from sst_interp.features.live_train import load_organism
from sst_interp.features.meta import read_meta
from sst_interp.organism.looped import encode_prompts
from sst_interp.organism.task import split_items
from sst_interp.organism.tokenizer import hops_tokenizer
from sst_interp.store import Run
from tests.unit.conftest import fails_with_one_error_line

pytestmark = [pytest.mark.usefixtures("one_thread")]


def test_live_states_equal_the_recorded_answer_column_exactly(tmp_path):
    out = tmp_path / "run"
    assert record_main(["--model", "hops-organism", "--questions", "hops", "--source-option", "n=6", "--depths", "2",
                        "--device", "cpu", "--out", str(out)]) == 0
    run = Run.open(out)
    model, spec, _ = load_organism("hops-organism")
    questions = split_items(spec, "test", 6)
    index = {f"hops-test-{n:04d}": n for n in range(len(questions))}  # the hops source numbers the split's items
    ids = encode_prompts(hops_tokenizer(), questions)
    compared = 0
    for layer in (0, 1):
        states = live_states(model, ids, 2, layer)
        assert sorted(states) == [1, 2] and states[1].shape == (6, ids.shape[1], 128)
        for chunk in run.hidden_rows(2, layers=[layer]):
            for qid, position, iteration, values in zip(chunk.question_id, chunk.position, chunk.iteration,
                                                        chunk.values):
                if position == 0:  # the prefill's last column: the answer column
                    np.testing.assert_array_equal(states[int(iteration)][index[qid], -1].numpy(), values)
                    compared += 1
    assert compared == 2 * 2 * 6
    # the hooks are owned: none is left on the model
    assert all(not module._forward_hooks for module in model.backbone.modules())


def test_live_batches_cover_every_position_and_shuffled_dims_keep_each_states_values():
    model, spec, _ = load_organism("hops-organism")
    ids = encode_prompts(hops_tokenizer(), split_items(spec, "train", 8))
    plain = LiveBatches(model, ids, 2, 0, (1, 2), batch_size=16, buffer=1024, seed=0)
    next(plain)
    assert dict(plain.tokens) == {1: 8 * ids.shape[1], 2: 8 * ids.shape[1]}
    shuffled = LiveBatches(model, ids, 2, 0, (1, 2), batch_size=16, buffer=1024, seed=0, shuffle_dims=True)
    states = plain.states_of(ids)
    permuted = shuffled.states_of(ids)
    np.testing.assert_array_equal(np.sort(states, axis=1), np.sort(permuted, axis=1))
    assert not np.array_equal(states, permuted)


def test_train_live_writes_a_shared_dictionary_naming_its_source(tmp_path, capsys):
    torch.manual_seed(0)
    out = tmp_path / "dictionary"
    assert features_main(["train", "--live", "hops-organism", "--layer", "0", "--layout", "shared", "--questions",
                          "32", "--depth", "2", "--width", "256", "--k", "8", "--steps", "20", "--batch-size", "64",
                          "--out", str(out)]) == 0
    meta = read_meta(out)
    assert meta.iterations == (1, 2) and meta.run == "live:hops-organism" and meta.holdout == 0.0
    assert meta.source["split"] == "train" and meta.source["questions"] == 32 and meta.source["depth"] == 2
    assert meta.source["task"]["bindings"] == 8 and len(meta.source["checkpoint_sha256"]) == 64
    assert meta.tokens == {"1": 32 * 11, "2": 32 * 11}  # every position of every prompt, 11 columns each
    assert json.loads((out / "cfg.json").read_text())["d_in"] == 128


def test_bad_live_input_is_one_error_line(tmp_path, capsys):
    out = tmp_path / "x"
    fails_with_one_error_line(capsys, features_main, ["train", "--live", str(tmp_path), "--layer", "0", "--out",
                                                      str(out)], "is not an organism folder")
    fails_with_one_error_line(capsys, features_main, ["train", "--live", "hops-organism", "--layer", "0"],
                              "--live needs --out")
    fails_with_one_error_line(capsys, features_main, ["train", "--layer", "0", "--out", str(out)],
                              "exactly one of --run")
    assert not out.exists()
