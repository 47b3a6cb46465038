"""The organism's training command: a few steps to keep it honest, an interrupted run resumes to the same weights,
its folder records under ``--questions hops``, and bad input is one ``error:`` line with nothing written."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from sst_interp.cli.organism import main as organism_main
from sst_interp.organism import train as train_module
from sst_interp.organism.config import LoopedTrainConfig
from sst_interp.organism.train import TABLE_FILE, read_table, train_looped
from tests.unit.conftest import fails_with_one_error_line, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["--steps", "4", "--batch-size", "4", "--hidden-size", "8", "--max-depth", "2", "--test-size", "8",
        "--follow-ups", "1"]


def tiny_config(out: Path, **changes) -> LoopedTrainConfig:
    return replace(LoopedTrainConfig(out=out, steps=4, batch_size=4, hidden_size=8, max_depth=2, test_size=8,
                                     follow_ups=1), **changes)


def test_training_writes_a_model_folder_with_its_table(tmp_path, capsys):
    out = tmp_path / "organism"
    assert organism_main(["train", "--out", str(out), *TINY]) == 0
    printed = capsys.readouterr().out
    assert "| depth | h=1 | h=2 | h=3 | h=4 | h=5 | h=6 |" in printed
    assert {"config.json", "model.safetensors", "tokenizer.json", "organism.json", "train_log.csv",
            TABLE_FILE} <= {p.name for p in out.iterdir()}
    table = read_table(out / TABLE_FILE)
    assert sorted(table) == [1, 2] and all(sum(n for _, n in row.values()) == 8 for row in table.values())
    assert json.loads((out / "config.json").read_text())["model_type"] == "hrm_text"
    assert len((out / "train_log.csv").read_text().splitlines()) == 1 + 4
    # rerunning a finished run changes nothing
    before = (out / "model.safetensors").read_bytes()
    assert organism_main(["train", "--out", str(out), *TINY]) == 0
    assert (out / "model.safetensors").read_bytes() == before


def test_an_interrupted_run_resumes_to_the_uninterrupted_weights(tmp_path, monkeypatch):
    whole = tmp_path / "whole"
    train_looped(tiny_config(whole, checkpoint_every=2))
    resumed = tmp_path / "resumed"
    real_save = torch.save

    def save_then_die(obj, path):
        real_save(obj, path)
        raise KeyboardInterrupt  # killed right after the step-2 checkpoint

    monkeypatch.setattr(train_module.torch, "save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_looped(tiny_config(resumed, checkpoint_every=2))
    monkeypatch.setattr(train_module.torch, "save", real_save)
    train_looped(tiny_config(resumed, checkpoint_every=2))
    a, b = load_file(whole / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (whole / "train_log.csv").read_text().count("\n") == (resumed / "train_log.csv").read_text().count("\n")


def test_a_pretrained_folder_or_other_settings_are_refused_with_nothing_written(tmp_path, capsys):
    pretrained = save_tiny_model(tmp_path / "pretrained", "hrm_text")
    before = sorted(p.name for p in pretrained.iterdir())
    fails_with_one_error_line(capsys, organism_main, ["train", "--out", str(pretrained), *TINY],
                              "holds a pretrained model")
    assert sorted(p.name for p in pretrained.iterdir()) == before
    done = tmp_path / "done"
    organism_main(["train", "--out", str(done), *TINY])
    fails_with_one_error_line(capsys, organism_main, ["train", "--out", str(done), *TINY[:-2], "--follow-ups", "2"],
                              "trained with other settings (follow_ups)")
    fails_with_one_error_line(capsys, organism_main, ["train", "--out", str(tmp_path / "x"), "--hidden-size", "10"],
                              "--hidden-size 10")
    fails_with_one_error_line(capsys, organism_main, ["train", "--out", str(tmp_path / "y"), "--max-hops", "9"],
                              "cannot hold a 9-hop chain")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_the_organism_records_hops_and_another_tokenizer_is_refused(tmp_path, capsys):
    from sst_interp.cli.record import main as record_main
    from sst_interp.store import Run

    organism = tmp_path / "organism"
    train_looped(tiny_config(organism))
    out = tmp_path / "run"
    flags = ["--questions", "hops", "--limit", "4", "--depths", "1,2", "--top-k", "6", "--full-positions", "1",
             "--sketch-positions", "0", "--device", "cpu"]
    assert record_main(["--model", str(organism), *flags, "--out", str(out)]) == 0
    run = Run.open(out)
    questions = run.questions()
    assert [json.loads(m)["hops"] for m in questions["metadata"]] == [1, 2, 3, 4]
    assert run.manifest["family"] == "hrm_text"
    other = save_tiny_model(tmp_path / "other", "hrm_text")
    refused = tmp_path / "refused"
    fails_with_one_error_line(capsys, record_main, ["--model", str(other), *flags, "--out", str(refused)],
                              "--questions hops needs a model trained on the hops task")
    assert not refused.exists()


def test_the_lens_by_hop_agrees_with_the_graded_answers_and_the_truth(tmp_path):
    """On HRM-Text the lens at the last iteration is the emitted distribution, so 'answer on top' there is exactly
    the grader's verdict; every row's hop value is the stored chain's."""
    from sst_interp.analyses.hops import answer_resolution, lens_by_hop
    from sst_interp.cli.record import main as record_main
    from sst_interp.store import Run

    organism = tmp_path / "organism"
    train_looped(tiny_config(organism))
    out = tmp_path / "run"
    assert record_main(["--model", str(organism), "--questions", "hops", "--limit", "8", "--depths", "2",
                        "--top-k", "6", "--full-positions", "1", "--sketch-positions", "0", "--device", "cpu",
                        "--out", str(out)]) == 0
    run = Run.open(out)
    lens = lens_by_hop(run, 2)
    assert len(lens) == 8 * 2 and sorted(lens["iteration"].unique()) == [1, 2]
    correct = run.generations().query("depth == 2").set_index("question_id")["correct"]
    last = lens[lens["iteration"] == 2].set_index("question_id")
    assert (last["top_is_answer"] == correct.reindex(last.index)).all()
    chains = {q: json.loads(m)["chain"] for q, m in zip(run.questions()["question_id"], run.questions()["metadata"])}
    for row in lens.itertuples():
        assert row.hop_value == chains[row.question_id][min(row.iteration, row.hops)]
        assert row.top_is_hop_value == (row.top_token == row.hop_value)
    table = answer_resolution(run, 2)
    assert table["questions"].tolist() == lens[lens["iteration"] == 1].groupby("hops").size().tolist() == \
        [2, 2, 1, 1, 1, 1]  # the split's hop counts cycle 1..6
    assert table["iteration_2"].tolist() == last.groupby("hops")["top_is_answer"].mean().tolist()
