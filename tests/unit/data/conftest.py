"""Fixtures for the data tests: the hand-made files in tests/data, the real benchmark rows in tests/data/benchmarks
(the full benchmark files, ``shared_data``, are a fixture of tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.paths import BENCHMARK_FIXTURES

FIXTURES = Path(__file__).parents[2] / "data"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def benchmark_fixtures() -> Path:
    """Real first rows of GSM8K, MATH-500 and HumanEval, in the repository (``--data`` layout)."""
    return BENCHMARK_FIXTURES


@pytest.fixture(autouse=True)
def _no_data_dir_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests choose their own data folder; a user's SST_INTERP_DATA_DIR must not leak in."""
    monkeypatch.delenv("SST_INTERP_DATA_DIR", raising=False)
