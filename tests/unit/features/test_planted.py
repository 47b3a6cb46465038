"""Dictionaries trained through the suite's own stream on a run whose states are planted sparse sums of known
directions: TopK recovers most planted directions, every architecture saves in SAELens' format and loads with
``SAE.load_from_disk`` unchanged, and the sidecar records what the training read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.unit.features.conftest import FEATURES, K, train


def recovered(directions: np.ndarray, decoder: np.ndarray, cosine: float = 0.9) -> float:
    """The fraction of planted directions some decoder row points along (cosine above ``cosine``)."""
    rows = decoder / np.linalg.norm(decoder, axis=1, keepdims=True)
    return float(((directions @ rows.T).max(axis=1) > cosine).mean())


def test_a_topk_dictionary_recovers_the_planted_directions(shared_dictionary: Path, directions: np.ndarray):
    from sst_interp.features import Dictionary

    decoder = Dictionary.load(shared_dictionary).sae.W_dec.detach().numpy()
    assert recovered(directions, decoder) >= 0.9
    # the control: as many random unit rows point along almost none of them
    random_rows = np.random.default_rng(1).standard_normal(decoder.shape)
    assert recovered(directions, random_rows) < 0.1


def test_a_saved_dictionary_loads_in_sae_lens_unchanged(shared_dictionary: Path, planted_run: Path):
    from sae_lens import SAE
    from safetensors.torch import load_file

    from sst_interp.features import Dictionary

    sae = SAE.load_from_disk(shared_dictionary)
    ours = Dictionary.load(shared_dictionary)
    weights = load_file(shared_dictionary / "sae_weights.safetensors")
    for name, value in weights.items():
        assert torch.equal(getattr(sae, name).detach(), value), name
    states = torch.randn(64, ours.meta.d_in, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sae.encode(states), ours.encode(states))
    assert torch.equal(sae.decode(sae.encode(states)), ours.reconstruct(states))
    assert json.loads((shared_dictionary / "cfg.json").read_text())["architecture"] == "topk"
    # saved with unit decoder rows and rescale_acts_by_decoder_norm kept, so SAELens' fold (which it refuses for a
    # TopK SAE without that flag) is allowed and changes no activation
    folded = SAE.load_from_disk(shared_dictionary, fold_W_dec_norm=True)
    torch.testing.assert_close(folded.encode(states), sae.encode(states), rtol=1e-5, atol=1e-5)


def test_the_sidecar_records_the_run_site_tokens_and_seed(shared_dictionary: Path, planted_run: Path):
    from sst_interp.features import read_meta
    from sst_interp.features.sites import run_identity
    from sst_interp.features.states import held_out
    from sst_interp.store import Run

    meta = read_meta(shared_dictionary)
    run = Run.open(planted_run)
    training = [q for q in run.question_ids(2) if not held_out(q, meta.holdout, meta.seed)]
    assert (meta.layout, meta.architecture, meta.layer, meta.iterations, meta.depth) == ("shared", "topk", 0, (1, 2), 2)
    assert (meta.d_in, meta.width, meta.k, meta.seed) == (16, 2 * FEATURES, K, 0)
    assert meta.run == str(planted_run) and meta.run_identity == run_identity(run)
    assert meta.questions == len(training) and 0 < len(training) < 250
    assert meta.tokens == {"1": 8 * len(training), "2": 8 * len(training)}  # 8 positions per question
    assert meta.samples == 300 * 256


@pytest.mark.parametrize("architecture, saved", [("batchtopk", "jumprelu"), ("jumprelu", "jumprelu")])
def test_batchtopk_and_jumprelu_train_and_load_in_sae_lens(architecture, saved, planted_run, directions, tmp_path):
    from sae_lens import SAE

    out = tmp_path / architecture
    train(planted_run, out, layout="shared", architecture=architecture)
    sae = SAE.load_from_disk(out)
    assert json.loads((out / "cfg.json").read_text())["architecture"] == saved
    assert recovered(directions, sae.W_dec.detach().numpy()) >= 0.6


def test_encode_run_gives_the_activations_of_every_state(shared_dictionary: Path, planted_run: Path):
    from sst_interp.features import DictionarySet
    from sst_interp.store import Run

    dictionaries = DictionarySet.load(shared_dictionary)
    run = Run.open(planted_run)
    acts = dictionaries.encode_run(run, iterations=[2])
    assert len(acts.rows) == 250 * 8 and acts.activations.shape == (250 * 8, 2 * FEATURES)
    assert set(acts.rows["iteration"]) == {2} and set(acts.rows["position"]) == set(range(8))
    # the same states through the dictionary directly (the run's own reader)
    block = next(run.hidden(2, question_ids=[acts.rows["question_id"].iloc[0]], layers=[0]))
    direct = dictionaries[2].encode(block.values[:, 1, 0]).numpy()
    first = acts.rows["question_id"] == block.question_id
    assert np.array_equal(acts.activations[first.to_numpy()].toarray(), direct)
    tidy = acts.tidy()
    assert len(tidy) == acts.activations.nnz and (tidy["activation"] > 0).all()
    assert tidy.groupby(["question_id", "position"]).size().max() <= K  # TopK: at most k active per state
