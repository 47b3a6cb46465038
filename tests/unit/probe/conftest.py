"""Shared fixtures of the probe tests: planted arrays and probes trained once per session."""

from __future__ import annotations

import pytest

from sst_interp.probe.model import ProbeConfig
from sst_interp.probe.train import train_probe
from tests.unit.probe.planted import planted_data

# Strong enough that 60 epochs of Adam at 1e-3 find the feature on ~60 rows (training is the paper's, unchanged).
STRENGTH, NOISE = 8.0, 0.5


@pytest.fixture(scope="session")
def planted():
    """ProbeData with the halt feature in PLANTED_DIMS (see planted.py)."""
    return planted_data(strength=STRENGTH, noise=NOISE, seed=0)


@pytest.fixture(scope="session")
def planted_probe(planted):
    """The 10-unit SiLU probe trained on ``planted`` with the paper's recipe."""
    probe, _ = train_probe(planted.x, planted.y, ProbeConfig(planted.hidden_size, hidden=10))
    return probe
