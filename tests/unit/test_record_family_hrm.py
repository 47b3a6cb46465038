"""``record --model <tiny HRM-Text folder> --depths 1,2`` then ``report --run``: the family's run directory, addressed
by (turn, position, iteration, layer) with the manifest naming the family and its loop, read by the same reader and
report as an SST run; and the family's refusals (one ``error:`` line, exit 2, nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from sst_interp.cli.record import main as record_main
from sst_interp.store import Run
from tests.unit.conftest import FAST, fails_with_one_error_line, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def hrm_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("hrm") / "model", "hrm_text")


@pytest.fixture(scope="module")
def hrm_run(hrm_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "hrm"
    torch.set_num_threads(1)
    assert record_main([*FAST, "--model", str(hrm_folder), "--depths", "1,2", "--limit", "2", "--out", str(out)]) == 0
    return out


def test_hrm_record_writes_a_family_run_addressed_by_iteration_and_layer(hrm_run: Path) -> None:
    run = Run.open(hrm_run)
    manifest = run.manifest
    assert manifest["family"] == "hrm_text" and run.depths == [1, 2]
    loop = manifest["loop"]
    assert loop["depth_key"] == "H_cycles" and "z_H" in loop["lens"] and "z_L" in loop["carries"]
    assert loop["layers"][-1] == "H.H_module.layers.1" and loop["iterations_per_layer"] == {"1": [1] * 6,
                                                                                              "2": [2] * 6}
    assert run.num_layers == 6 and manifest["hidden_size"] == 32
    for depth in (1, 2):
        blocks = list(run.hidden(depth))
        assert len(blocks) == 2
        for block in blocks:
            # FAST records 2 full positions; every (iteration, layer) of the depth is visited: no NaN
            assert block.values.shape == (2, depth, 6, 32) and not np.isnan(block.values).any()
        logits = list(run.logits(depth))
        assert all(block.entropy.shape[1] == depth for block in logits)
    gens = run.generations()
    assert set(gens["depth"]) == {1, 2} and (gens["n_tokens"] > 0).all()


def test_hrm_record_then_report_writes_artefacts(hrm_run: Path, tmp_path: Path) -> None:
    from sst_interp.cli.report import main as report_main

    out = tmp_path / "report"
    assert report_main(["--run", str(hrm_run), "--out", str(out)]) == 0
    assert (out / "index.html").is_file()
    assert (out / "tab_staged_breakdown.csv").is_file() or any(out.glob("tab_staged_breakdown*"))


def test_hrm_rerun_resumes_without_recording_again(hrm_folder: Path, hrm_run: Path, capsys) -> None:
    before = json.loads((hrm_run / "manifest.json").read_text())["status"]
    assert record_main([*FAST, "--model", str(hrm_folder), "--depths", "1,2", "--limit", "2",
                        "--out", str(hrm_run)]) == 0
    assert "4 of 4 question-depths already recorded" in capsys.readouterr().out
    assert json.loads((hrm_run / "manifest.json").read_text())["status"] == before


def test_hrm_unsupported_model_type_folder_is_one_error_line(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "gpt2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    out = tmp_path / "out"
    fails_with_one_error_line(capsys, record_main, [*FAST, "--model", str(folder), "--out", str(out)],
                              "unsupported model_type 'gpt2'; supported families: sst")
    assert not out.exists()


@pytest.mark.parametrize("flags, phrase", [
    (["--checkpoint", "demo-codeact"], "--checkpoint loads an SST checkpoint; hrm_text has none"),
    (["--prompt-mode", "two_pass"], "hrm_text has none"),
    (["--depth-policy", "kl:0.01"], "hrm_text runs are recorded at fixed depths only"),
])
def test_hrm_flags_the_family_cannot_honour_are_one_error_line(hrm_folder: Path, tmp_path: Path, capsys,
                                                               flags: list[str], phrase: str) -> None:
    out = tmp_path / "out"
    fails_with_one_error_line(capsys, record_main, [*FAST, "--model", str(hrm_folder), "--depths", "1,2",
                                                    *flags, "--out", str(out)], phrase)
    assert not out.exists()
