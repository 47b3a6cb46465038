"""Fixtures of the explorer's tests: a planted synthetic run with its matched baseline, and app clients."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from sst_interp.explore.config import ExploreConfig
from sst_interp.explore.server import create_app, open_explorer
from tests.unit.reporting.builders import write_baseline_run, write_sst_run


@pytest.fixture(scope="session")
def planted(tmp_path_factory):
    """(folder holding ``sst`` and ``base``, the SST run's PlantedTruth)."""
    root = tmp_path_factory.mktemp("explore")
    truth = write_sst_run(root / "sst")
    write_baseline_run(root / "base")
    return root, truth


def client_for(run: Path, **options) -> TestClient:
    """A TestClient of the explorer on ``run`` (without the GMM fit's child process unless ``fit_gmm=True``)."""
    options.setdefault("fit_gmm", False)
    explorer = open_explorer(ExploreConfig(run=run, **options))
    return TestClient(create_app(explorer))
