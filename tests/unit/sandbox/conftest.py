"""Fixtures for the sandbox tests. Tests that need bubblewrap FAIL (not skip) without it."""

from __future__ import annotations

import shutil

import pytest

INSTALL_HINT = ("bubblewrap (bwrap) is not installed, so the sandbox cannot be tested: "
                "apt-get install bubblewrap (the CI script .ci/run installs it)")


@pytest.fixture
def bwrap() -> str:
    """Path of ``bwrap``; the test fails with an install hint when it is missing."""
    path = shutil.which("bwrap")
    if path is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    return path
