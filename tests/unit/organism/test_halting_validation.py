"""``organism overthink``: the paper's halting probe on the shipped overthinking organism, against the task's truth
(experiments.halting_validation), and its bad input."""

from __future__ import annotations

import pytest

from sst_interp.cli.organism import main as organism_main
from sst_interp.cli.record import main as record_main
from sst_interp.experiments import halting_validation as halting
from sst_interp.store import Run
from tests.unit.conftest import fails_with_one_error_line

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]


@pytest.fixture(scope="module")
def overthink_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("overthink") / "run"
    assert record_main(["--model", "hops-overthink", "--questions", "hops", "--source-option", "n=96", "--depths",
                        "1,2,3", "--device", "cpu", "--out", str(out)]) == 0
    return Run.open(out)


def test_the_probe_halts_where_the_task_says_the_answer_breaks(overthink_run):
    row = halting.halting_row(overthink_run, [0, 1])
    table = row.detail.set_index("layer")
    # measured on these 96 questions: the probe halts at ceil(k/2) for most questions whose chain runs on, and its
    # halting beats every flat depth
    assert (table["halts_at_truth_runs_on"] >= 0.7).all()
    assert (table["probe_accuracy"] > table["best_flat_accuracy"]).all()
    assert (table["staged_accuracy"] >= table["probe_accuracy"]).all()  # the oracle bounds any halting rule


def test_the_loocv_holds_out_must_halt_questions_far_above_the_base_rate(overthink_run):
    row = halting.loocv_row(overthink_run, 1, permutations=0)
    detail = row.detail.iloc[0]
    assert detail["folds"] >= 40 and detail["accuracy"] > detail["base_rate"] and row.recovered
    assert "no permutations drawn" in row.measured


def test_the_essential_row_reads_the_count_and_the_chain_from_the_states(overthink_run):
    row = halting.essential_row(overthink_run, 1)
    cells = row.detail.set_index(["target", "dimensions"])
    assert cells.at[("count_done", "all"), "heldout_accuracy"] > cells.at[("count_done", "all"), "majority"]
    assert cells.at[("chain_runs_on", "all"), "heldout_accuracy"] > cells.at[("chain_runs_on", "all"), "majority"]


def test_a_layer_outside_the_run_and_a_run_of_another_task_are_one_error_line(overthink_run, tmp_path, capsys):
    out = tmp_path / "halting"
    fails_with_one_error_line(capsys, organism_main, ["overthink", "--run", str(overthink_run.path), "--out", str(out),
                                                      "--layers", "0,7"], "layer 7 is outside the run's layers 0..1")
    assert not out.exists()
    plain = tmp_path / "plain"
    assert record_main(["--model", "hops-organism", "--questions", "hops", "--source-option", "n=6", "--depths", "1,2",
                        "--device", "cpu", "--out", str(plain)]) == 0
    fails_with_one_error_line(capsys, organism_main, ["overthink", "--run", str(plain), "--out", str(out)],
                              "holds no counted-hops questions")
    assert not out.exists()


def test_the_sec5_families_against_the_overshoot(overthink_run):
    from sst_interp import study
    from sst_interp.experiments.sec5_validation import OVERSHOOT, sec5_rows

    causal, reorganisation, later, convergent, precision = sec5_rows(study.open(overthink_run.path), OVERSHOOT)
    # measured on these 96 questions at depths 1-3: low overlap follows the first divergence in 2 (0 of the 240 at
    # depths 1-5 in docs/organism.md), and the questions whose answer changes with depth are those the overshoot
    # truth says keep moving
    exceptions = causal.detail.set_index("category").at["exceptions_argmax_flip_before_low_overlap", "questions"]
    assert exceptions <= 2 and float(causal.measured.split(", ")[-1].split(" of them")[0]) >= 0.9
    assert reorganisation.recovered
    assert later.detail["still_computing"].mean() >= 0.7
    assert convergent.measured.startswith("0 convergent of ") and precision.recovered
