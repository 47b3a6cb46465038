"""Damaged pages stop ``report`` and ``probe train`` with one ``error:`` line naming the file and exit 2 (a
synthetic run with a planted halting feature, so both commands have real work to do)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sst_interp.synthetic import SyntheticSpec, write_synthetic_run
from tests.unit.store.test_store_integrity import flip_page

SPEC = dict(halting_dims=(5, 17, 30), halting_strength=3.0, n_questions=40, num_layers=4, hidden_size=48,
            full_positions=1, top_k=8, vocab_size=256, batch_questions=40, extra_tokens=2, seed=1)
TARGETS = {"hidden": ("hidden/depth=1/part-000001.parquet", "values"),
           "logits": ("logits/depth=2/part-000002.parquet", "top_logprobs"),
           "generations": ("generations.parquet", "token_ids")}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("synthetic") / "run"
    write_synthetic_run(path, SyntheticSpec(**SPEC))
    return path


def _damaged_copy(pristine: Path, tmp_path: Path, kind: str) -> tuple[Path, Path]:
    path = tmp_path / "run"
    shutil.copytree(pristine, path)
    rel, column = TARGETS[kind]
    flip_page(path / rel, column)
    return path, path / rel


def _one_error_line(capsys, target: Path) -> None:
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(target) in errors[0] and "damaged" in errors[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize("kind", ["hidden", "generations"])
def test_probe_train_refuses_a_damaged_run(pristine, tmp_path, capsys, kind):
    from sst_interp.cli.probe import main

    path, target = _damaged_copy(pristine, tmp_path, kind)
    with pytest.raises(SystemExit) as info:
        main(["train", "--run", str(path), "--out", str(tmp_path / "probe")])
    assert info.value.code == 2
    _one_error_line(capsys, target)


@pytest.mark.parametrize("kind", list(TARGETS))
def test_report_refuses_a_damaged_run(pristine, tmp_path, capsys, kind):
    from sst_interp.cli.report import main

    path, target = _damaged_copy(pristine, tmp_path, kind)
    with pytest.raises(SystemExit) as info:
        main(["--run", str(path), "--out", str(tmp_path / "report"), "--quiet"])
    assert info.value.code == 2
    _one_error_line(capsys, target)
