"""The per-layer logit lens (issue 31) on a run recorded with a tiny random Gemma 3 saved to a folder: at the last
layer the lens is the model's own output, so its top-K tokens and log-probs are the recorded ones."""

from __future__ import annotations

import numpy as np
import pytest

from sst_interp import analyses, study
from sst_interp.store import Run
from sst_interp.synthetic import SyntheticSpec, write_synthetic_run
from tests.unit.conftest import FAST, save_tiny_model


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """``record --model FOLDER`` with a tiny random Gemma 3 (depths 1, 2; 2 full positions)."""
    import torch

    from sst_interp.cli.record import main as record_main

    root = tmp_path_factory.mktemp("lens")
    model = save_tiny_model(root / "model")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        record_main([*FAST, "--model", str(model), "--out", str(root / "run"), "--depths", "1,2", "--limit", "2",
                     "--batch-size", "2"])
    finally:
        torch.set_num_threads(before)
    return root


def test_the_last_layer_of_the_lens_is_the_recorded_output(recorded):
    run = Run.open(recorded / "run")
    a = study.open(run)
    qid = run.question_ids()[0]
    k = int(run.manifest["top_k"])
    for depth in (1, 2):
        block = next(run.logits(depth, [qid]))
        for position in (0, 1):
            lens = a.logit_lens(qid, depth, position, top_n=k)
            assert list(lens.columns) == ["iteration", "layer", "rank", "token_id", "logprob"]
            assert sorted(set(lens["layer"])) == list(range(run.num_layers))
            last = lens[lens["layer"] == run.num_layers - 1]
            j = block.positions.tolist().index(position)
            for i, iteration in enumerate(block.iterations.tolist()):
                rows = last[last["iteration"] == iteration].sort_values("rank")
                assert rows["token_id"].iloc[0] == block.argmax[j, i]
                assert rows["token_id"].tolist() == block.top_ids[j, i, :k].tolist()
                np.testing.assert_allclose(rows["logprob"], block.top_logprobs[j, i, :k], atol=2e-4)
    assert "lens:head" in a._memo  # loaded once, for the lens only


def test_one_message_when_the_model_or_the_states_are_missing(recorded, tmp_path):
    run = Run.open(recorded / "run")
    qid = run.question_ids()[0]
    with pytest.raises(analyses.NotAvailable, match="position 3 has no full hidden states"):
        study.open(run).logit_lens(qid, 2, 3)
    write_synthetic_run(tmp_path / "syn", SyntheticSpec(n_questions=2, depths=(1, 2), num_layers=2, hidden_size=16,
                                                        vocab_size=64, top_k=8, batch_questions=2))
    with pytest.raises(analyses.NotAvailable, match="^logit lens: the run names no model"):
        study.open(tmp_path / "syn").logit_lens("syn0000", 2, 0)
    moved = recorded / "model"
    gone = recorded / "model-moved"
    moved.rename(gone)
    try:
        with pytest.raises(analyses.NotAvailable, match="could not be loaded") as caught:
            study.open(run).logit_lens(qid, 2, 0)
        assert "\n" not in str(caught.value) and str(moved) in str(caught.value)
    finally:
        gone.rename(moved)
