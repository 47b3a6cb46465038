"""Test-wide settings: no network access to the Hugging Face hub, deterministic torch; the optional full benchmark
files (``shared_data``), whose tests carry the ``realdata`` marker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.paths import SHARED_DATA_VARIABLE, shared_data_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # scripts/test.sh runs one pytest-xdist worker per core: a worker (and every process it starts: torchrun,
    # the console scripts, notebook kernels) keeps to one thread, or the workers' thread pools fight over the cores
    # (a tiny model runs ~10x slower so). Set before torch is first imported, which reads it then.
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"


@pytest.fixture
def shared_data() -> Path:
    """The full benchmark files: skipped, saying how to run them, when ``$SST_INTERP_SHARED_DATA`` is unset; a
    variable that names no folder is an error, since whoever set it asked for these tests."""
    folder = shared_data_dir()
    if folder is None:
        pytest.skip(f"full benchmark files: set {SHARED_DATA_VARIABLE} to a folder with gsm8k/, math500/, "
                    "humaneval/ and gpqa/ to run this test")
    if not folder.is_dir():
        pytest.fail(f"{SHARED_DATA_VARIABLE}={folder} is not a folder")
    return folder


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that reads the full benchmark files is ``realdata``, so CI's second step selects exactly them."""
    for item in items:
        if "shared_data" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.realdata)
