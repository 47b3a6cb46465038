"""Shared fixtures of the hooks tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_thread: None) -> None:
    """Every hooks test runs tiny models on one torch thread (``one_thread`` is in tests/unit/conftest.py)."""
