"""Fixtures for the data tests: the hand-made files in tests/data and the shared benchmark folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parents[2] / "data"


def shared_data_dir() -> Path:
    """The shared benchmark folder: ``$SST_INTERP_SHARED_DATA`` or ``<repo>/../shared/data``."""
    env = os.environ.get("SST_INTERP_SHARED_DATA")
    return Path(env) if env else (Path(__file__).parents[3] / "../shared/data").resolve()


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def shared_data() -> Path:
    """The shared benchmark folder; the test is skipped (with the reason) when it is absent."""
    folder = shared_data_dir()
    if not folder.is_dir():
        pytest.skip(f"shared benchmark data not found at {folder}; set SST_INTERP_SHARED_DATA to run real-file tests")
    return folder


@pytest.fixture(autouse=True)
def _no_data_dir_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests choose their own data folder; a user's SST_INTERP_DATA_DIR must not leak in."""
    monkeypatch.delenv("SST_INTERP_DATA_DIR", raising=False)
