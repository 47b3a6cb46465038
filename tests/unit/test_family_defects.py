"""Defects 2, 5, 6 and 7 of issue 46, on one tiny Inkling-2 Loop run (``record --depths 1,2``); each test failed
before its fix.

- 2: the per-position depth simulation read Inkling-2 Loop's lens (a logit lens of the looped block) as the emitted
  token; it is refused with the reason, and the report's Pareto rows, policy histogram and convergence table do not
  draw on it;
- 5: a family run had no numerics fingerprint, so a resume with another ``--threads`` was accepted;
- 6: ``tab_precision_proof`` mapped the paper's layers onto the layers it measured (2) instead of picking among
  them, and showed only the ``all`` row;
- 7: ``tab:overthinking`` was listed by ``available()`` where ``data()`` then raised ``NotAvailable``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sst_interp import study
from sst_interp.analyses.availability import NotAvailable
from sst_interp.analyses.loop_manifest import fixed_run_reason, lens_reason
from sst_interp.cli.position_sim import main as position_sim_main
from sst_interp.cli.record import main as record_main
from tests.unit.conftest import FAST, fails_with_one_error_line, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

LENS = "lens is not the emitted distribution"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("inkling") / "model", "inkling2_loop")


@pytest.fixture(scope="module")
def run(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "inkling"
    torch.set_num_threads(1)
    assert record_main([*FAST, "--model", str(folder), "--depths", "1,2", "--limit", "3", "--threads", "1",
                        "--out", str(out)]) == 0
    return out


# ------------------------------------------------------------------------------------------------ defect 2
def test_lens_reason_reads_the_declaration_written_into_the_manifest() -> None:
    fixed = {"depth_policy": "fixed", "depths": [1, 2], "logits_every_iteration": True}
    assert lens_reason(fixed) is None and fixed_run_reason(fixed) is None  # an SST run replays
    hrm = fixed | {"loop": {"family": "hrm_text", "lens_is_output": True}}
    assert lens_reason(hrm) is None and fixed_run_reason(hrm) is None
    for loop in ({"family": "inkling2_loop", "lens_is_output": False}, {"family": "dory", "lens_is_output": False},
                 {"family": "inkling2_loop"}):  # the last: a run written before the field existed
        assert LENS in lens_reason(fixed | {"loop": loop}) and LENS in fixed_run_reason(fixed | {"loop": loop})


def test_inkling_position_simulation_is_refused_with_the_reason(run: Path, capsys: pytest.CaptureFixture) -> None:
    assert json.loads((run / "manifest.json").read_text())["loop"]["lens_is_output"] is False
    # a policy that never fires: before the fix it "changed" tokens, reading the lens argmax as the emitted token
    fails_with_one_error_line(capsys, position_sim_main, ["--run", str(run), "--policy", "margin:1e9,max=2"], LENS)


def test_inkling_report_draws_no_simulated_rows_histogram_or_convergence(run: Path) -> None:
    a = study.open(run)
    pareto = a.data("depth_pareto")
    assert (pareto["source"] == "live").any()  # the measured flat depths stand: they are the model's own tokens
    assert not (pareto["source"] == "simulated").any()
    assert any(LENS in note for note in a.notes("depth_pareto"))
    available = a.available().set_index("measurement")
    for name in ("depth_policy_histogram", "depth_policy_convergence"):
        assert not available.loc[name, "available"] and LENS in available.loc[name, "reason"]
        with pytest.raises(NotAvailable, match=LENS):
            a.data(name)


# ------------------------------------------------------------------------------------------------ defect 5
def test_family_run_records_a_numerics_fingerprint_and_refuses_another_thread_count(
        folder: Path, run: Path, capsys: pytest.CaptureFixture) -> None:
    identity = json.loads((run / "manifest.json").read_text())["identity"]
    assert identity["numerics"]["threads"] == 1 and identity["numerics"]["device_kind"] == "cpu"
    before = (run / "manifest.json").read_bytes()
    fails_with_one_error_line(capsys, record_main,
                              [*FAST, "--model", str(folder), "--depths", "1,2", "--limit", "3", "--threads", "2",
                               "--out", str(run)], "threads=1, this command has threads=2")
    assert (run / "manifest.json").read_bytes() == before  # nothing written
    # the same thread count resumes
    assert record_main([*FAST, "--model", str(folder), "--depths", "1,2", "--limit", "3", "--threads", "1",
                        "--out", str(run)]) == 0
    assert "6 of 6 question-depths already recorded" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------ defect 6
def test_inkling_precision_proof_shows_the_looped_layers(run: Path) -> None:
    table = study.open(run).data("tab_precision_proof")
    # iterations 1 -> 2 exist only at the looped layers 2 and 3 (the others run once): both are shown
    assert list(table["layer"]) == ["2", "3", "all"]


# ------------------------------------------------------------------------------------------------ defect 7
def test_every_measurement_available_on_a_family_run_computes(run: Path) -> None:
    a = study.open(run)
    listed = a.available()
    assert "tab:overthinking" in set(listed["label"])
    failed = {}
    for label in listed.loc[listed["available"], "label"]:
        try:
            a.data(label)
        except NotAvailable as err:
            failed[label] = str(err)
    assert not failed, failed
