"""Test-wide settings: no network access to the Hugging Face hub, deterministic torch; the optional full benchmark
files (``shared_data``), whose tests carry the ``realdata`` marker; the whole report of the planted inputs, built
once per test process (``planted_report``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


@contextmanager
def _shared_by_workers(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Path | None]:
    """A folder that the pytest-xdist workers of this run share (under the run's base temporary folder, which
    pytest removes with its old runs), held exclusively within the block (an ``fcntl`` lock); None outside xdist."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield None
        return
    import fcntl

    folder = tmp_path_factory.getbasetemp().parent / name  # each worker's base is <the run's base>/popen-gwN
    folder.mkdir(exist_ok=True)
    with open(folder.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield folder
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def planted_report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The whole report of the planted inputs (tests/unit/reporting/builders.py: the SST run, its baseline, a
    checkpoint and training logs): ``root``, ``truth`` (the planted truth), ``config``, ``result``, and
    ``pristine``, a copy of the output folder as the build left it (tests may rebuild into ``config.out``).

    Drawn once per test run (about 60 s of one core; the headless-Chromium test and the end-to-end tests, which
    pytest-xdist spreads over both workers, read it): the first worker to need it builds it into a folder the workers
    share, and each worker copies that (file times kept) into its own temporary folder and builds it again there,
    which the report's cache serves without computing or drawing anything. (``--dist loadgroup`` would keep the
    readers on one worker, but pytest-xdist 3.8 cannot group under pytest 9.2: it sets a node id attribute that
    pytest no longer reads.)"""
    from sst_interp.reporting import ReportConfig, build_report
    from tests.unit.reporting.builders import (
        few_permutations,
        theta_matrix,
        write_baseline_run,
        write_checkpoint,
        write_sst_run,
        write_training_logs,
    )

    def inputs(root: Path) -> Any:
        truth = write_sst_run(root / "runs" / "sst")
        write_baseline_run(root / "runs" / "base")
        write_checkpoint(root / "ckpt", theta_matrix())
        write_training_logs(root)
        return truth

    def config_of(root: Path) -> ReportConfig:
        return ReportConfig(runs=(root / "runs" / "sst",), baselines=(root / "runs" / "base",),
                            checkpoint=root / "ckpt", training_logs=(root / "sst_train", root / "base_train"),
                            out=root / "out", progress=False)

    root = tmp_path_factory.mktemp("report")
    with _shared_by_workers(tmp_path_factory, "planted_report") as shared:
        if shared is None:
            truth = inputs(root)
        else:
            if not (shared / "built").is_file():
                inputs(shared)
                with few_permutations():
                    build_report(config_of(shared))
                (shared / "built").write_text("")
            shutil.copytree(shared, root, dirs_exist_ok=True)  # copy2: the file times the cache keys read
            truth = write_sst_run(tmp_path_factory.mktemp("truth") / "sst")  # seeded: the same planted truth
    config = config_of(root)
    with few_permutations():
        result = build_report(config)
    pristine = shutil.copytree(config.out, root / "pristine", ignore=shutil.ignore_patterns(".cache"))
    yield {"root": root, "truth": truth, "config": config, "result": result, "pristine": Path(pristine)}
