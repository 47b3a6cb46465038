"""The features view (``explore RUN --dictionary PATH``): a position's top features at an iteration, each with its
activation at every iteration, equal to what ``DictionarySet.encode_run`` gives for the same states."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sst_interp.explore.config import ExploreConfig
from sst_interp.explore.server import open_explorer
from sst_interp.kernels.errors import UsageError
from tests.unit.explore.conftest import client_for
from tests.unit.features.planted import planted_directions, write_planted_run

pytest.importorskip("sae_lens")


@pytest.fixture(scope="module")
def run_and_dictionary(tmp_path_factory) -> tuple[Path, Path]:
    """A planted run (30 questions x 3 positions, depths 1 and 2) and a shared TopK dictionary on its depth 2."""
    from sst_interp.features import DictionarySet  # noqa: F401 - SAELens loaded here, once
    from sst_interp.features.options import TrainOptions
    from sst_interp.features.train import train_dictionaries

    root = tmp_path_factory.mktemp("explore-features")
    run = write_planted_run(root / "run", planted_directions(24, 12, seed=1), questions=30, depths=(1, 2),
                            num_layers=1, positions=3, k=3)
    torch.set_num_threads(1)
    train_dictionaries(TrainOptions(run=run, layer=0, layout="shared", width=48, k=3, steps=60, batch_size=64,
                                    lr=0.01, device="cpu", out=root / "dictionary"))
    return run, root / "dictionary"


@pytest.fixture(scope="module")
def client(run_and_dictionary):
    run, dictionary = run_and_dictionary
    return client_for(run, dictionary=dictionary)


def _encoded(run: Path, dictionary: Path, qid: str) -> dict[tuple[int, int], np.ndarray]:
    from sst_interp.features import DictionarySet

    acts = DictionarySet.load(dictionary).encode_run(run, question_ids=[qid])
    dense = acts.activations.toarray()
    return {(int(p), int(i)): dense[n] for n, (p, i) in enumerate(zip(acts.rows["position"], acts.rows["iteration"]))}


def test_the_top_features_and_their_activations_are_encode_runs(client, run_and_dictionary) -> None:
    run, dictionary = run_and_dictionary
    qid = "planted-0007"
    encoded = _encoded(run, dictionary, qid)
    for position in range(3):
        for iteration in (1, 2):
            view = client.get(f"/api/features?q={qid}&depth=2&turn=0&pos={position}&it={iteration}").json()
            assert view["available"] and view["iteration"] == iteration and view["iterations"] == [1, 2]
            chosen = encoded[(position, iteration)]
            active = np.flatnonzero(chosen)
            expected = sorted(active, key=lambda f: (-chosen[f], f))[:8]
            assert [r["feature"] for r in view["rows"]] == [int(f) for f in expected]
            assert view["active"] == active.size
            for row in view["rows"]:
                f = row["feature"]
                assert row["activation"] == float(chosen[f])
                assert row["activations"] == [float(encoded[(position, 1)][f]), float(encoded[(position, 2)][f])]
    summary = client.get("/api/run").json()
    assert summary["dictionary"] == str(dictionary)


def test_what_the_view_cannot_show_it_says(client, run_and_dictionary) -> None:
    run, _ = run_and_dictionary
    other_depth = client.get("/api/features?q=planted-0001&depth=1&turn=0&pos=0").json()
    assert not other_depth["available"] and "depth 2" in other_depth["message"]
    past = client.get("/api/features?q=planted-0001&depth=2&turn=0&pos=3").json()
    assert not past["available"] and "no full states at position 3" in past["message"]
    bad = client.get("/api/features?q=planted-0001&depth=2&turn=0&pos=0&it=5")
    assert bad.status_code == 400 and "iteration 5" in bad.json()["error"]
    without = client_for(run).get("/api/features?q=planted-0001&depth=2&turn=0&pos=0").json()
    assert not without["available"] and "--dictionary PATH" in without["message"]


def test_a_dictionary_that_is_not_one_is_refused_at_start(run_and_dictionary, tmp_path) -> None:
    run, _ = run_and_dictionary
    with pytest.raises(UsageError, match="holds no dictionary"):
        open_explorer(ExploreConfig(run=run, dictionary=tmp_path, fit_gmm=False))
