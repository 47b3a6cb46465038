"""Shared fixtures of the features tests: a planted run and dictionaries trained on it once per module.

SAELens is the ``features`` extra; without it these tests are skipped (``pip install -e ".[dev]"`` installs it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.unit.features.planted import planted_directions, write_planted_run

pytest.importorskip("sae_lens")

#: The planted dictionary: 32 unit directions in 16 dimensions (twice overcomplete), 3 active per state.
FEATURES, D, K = 32, 16, 3


@pytest.fixture(scope="session")
def directions() -> np.ndarray:
    return planted_directions(FEATURES, D, seed=0)


@pytest.fixture(scope="session")
def planted_run(tmp_path_factory: pytest.TempPathFactory, directions: np.ndarray) -> Path:
    """250 questions x 8 positions at depths 1 and 2, two layers: 4,000 states per layer at depth 2."""
    return write_planted_run(tmp_path_factory.mktemp("planted") / "run", directions, questions=250, depths=(1, 2),
                             num_layers=2, positions=8, k=K)


def train(run: Path, out: Path, **options) -> list:
    """train_dictionaries on ``run`` at layer 0 with the planted test's settings (overridable)."""
    from sst_interp.features.options import TrainOptions
    from sst_interp.features.train import train_dictionaries

    settings = dict(run=run, layer=0, width=2 * FEATURES, k=K, steps=300, batch_size=256, lr=0.01, device="cpu",
                    out=out)
    torch.set_num_threads(1)
    return train_dictionaries(TrainOptions(**{**settings, **options}))


@pytest.fixture(scope="session")
def shared_dictionary(planted_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TopK dictionary shared by iterations 1 and 2 of layer 0 of the planted run."""
    out = tmp_path_factory.mktemp("dictionaries") / "shared"
    train(planted_run, out, layout="shared")
    return out


@pytest.fixture(scope="session")
def per_iteration(planted_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TopK dictionaries of iterations 1 and 2 of layer 0, one each, at the shared one's width."""
    out = tmp_path_factory.mktemp("dictionaries") / "per-iteration"
    train(planted_run, out, layout="per-iteration", steps=150)
    return out
