"""The SST organism's command: a few steps of each stage write its folder and tables, its checkpoints record under
``--questions hops`` with the same answers as its tables, and a bad ``--out`` is one ``error:`` line with nothing
written."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer

from sst_interp.cli.organism import main as organism_main
from sst_interp.cli.record import main as record_main
from sst_interp.organism.tables import read_table
from sst_interp.organism.task import HopsSpec, split_items
from sst_interp.store import Run
from sst_interp.train.organism import BASELINE_DIR, MARKER, SST_DIR, TABLES, checkpoint_answers
from tests.unit.conftest import fails_with_one_error_line, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["--steps", "4", "--batch-size", "4", "--hidden-size", "8", "--test-size", "12", "--follow-ups", "1",
        "--sst-steps", "3", "--sst-batch-size", "4", "--sst-validation", "8", "--eval-every", "2", "--lora-r", "2",
        "--max-depth", "2", "--threads", "1"]


@pytest.fixture(scope="module")
def organism(tmp_path_factory) -> tuple[Path, str]:
    """One tiny SST organism for the module (its folder, and what the command printed)."""
    before = torch.get_num_threads()
    out = tmp_path_factory.mktemp("sst-organism") / "organism"
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            assert organism_main(["train-sst", "--out", str(out), *TINY]) == 0
    finally:
        torch.set_num_threads(before)
    return out, printed.getvalue()


def test_the_command_writes_the_backbone_both_checkpoints_and_the_tables(organism):
    out, printed = organism
    assert "the SST (depth = iterations" in printed and "the matched baseline" in printed
    assert printed.count("| depth | h=1 | h=2 | h=3 | h=4 | h=5 | h=6 |") == 3
    backbone = out / "backbone"
    assert json.loads((backbone / "config.json").read_text())["model_type"] == "gemma3_text"
    assert json.loads((backbone / "config.json").read_text())["num_hidden_layers"] == 2
    assert (backbone / "tokenizer.json").is_file() and (backbone / "train_log.csv").is_file()
    assert (out / SST_DIR / "best" / "sst_config.json").is_file()
    assert (out / BASELINE_DIR / "best" / "baseline.json").is_file()
    rows = [json.loads(line) for line in (out / "data" / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 4 and {row["completion"] for row in rows} <= set("0123456789")
    assert [row["hops"] for row in rows[:6]] == [1, 2, 3, 4, 5, 6]
    sst, baseline = (read_table(out / TABLES[name]) for name in ("sst", "baseline"))
    for table in (sst, baseline):
        assert sorted(table) == [1, 2] and all(sum(n for _, n in row.values()) == 12 for row in table.values())
    # no state stream: the baseline answers the same at every depth
    assert baseline[1] == baseline[2]
    # the SST and the baseline saw the same data in the same order, for the same number of steps
    logs = [(out / name / "train_log.csv").read_text().splitlines() for name in (SST_DIR, BASELINE_DIR)]
    assert len(logs[0]) == len(logs[1]) == 1 + 3
    assert json.loads((out / MARKER).read_text())["train"]["family"] == "gemma3_text"


def test_a_rerun_trains_nothing_and_a_lost_table_comes_back_the_same(organism):
    out, _ = organism
    # every save writes a new folder (or file) and renames it into place: an unchanged identity means no save
    saved = [out / SST_DIR / "best", out / SST_DIR / "last", out / BASELINE_DIR / "last"]

    def identities() -> list[tuple[int, int]]:
        return [(p.stat().st_ino, p.stat().st_mtime_ns) for p in (*saved, out / "backbone" / "model.safetensors")]

    before, table = identities(), (out / TABLES["sst"]).read_text()
    (out / TABLES["sst"]).unlink()
    with contextlib.redirect_stdout(io.StringIO()):
        assert organism_main(["train-sst", "--out", str(out), *TINY]) == 0
    assert identities() == before and (out / TABLES["sst"]).read_text() == table


def loud_copy(checkpoint: Path, folder: Path) -> Path:
    """``checkpoint`` with every blend near 0.9 (a tiny SST's own, about 0.03, rarely moves an argmax): prompt mode
    and depth then change its answers, so agreeing answers mean the same computation."""
    shutil.copytree(checkpoint, folder)
    meta = json.loads((folder / "sst_config.json").read_text())
    meta["sst"].update(a_min=0.5, a_max=0.95)
    (folder / "sst_config.json").write_text(json.dumps(meta))
    state = load_file(folder / "sst_state.safetensors")
    save_file({k: torch.full_like(v, 3.0) if k.endswith("theta") else v for k, v in state.items()},
              folder / "sst_state.safetensors")
    return folder


@pytest.mark.parametrize("loud", [False, True], ids=["trained", "loud"])
def test_the_sst_checkpoint_records_hops_with_the_tables_answers(organism, tmp_path, loud):
    out, _ = organism
    checkpoint = out / SST_DIR / "best"
    if loud:
        checkpoint = loud_copy(checkpoint, tmp_path / "loud")
    flags = ["--questions", "hops", "--limit", "12", "--depths", "1,2", "--top-k", "6", "--full-positions", "1",
             "--sketch-positions", "0", "--device", "cpu"]
    run_dir = tmp_path / "run"
    assert record_main(["--model", str(out / "backbone"), "--checkpoint", str(checkpoint), *flags,
                        "--out", str(run_dir)]) == 0
    run = Run.open(run_dir)
    questions = split_items(HopsSpec(**json.loads((out / MARKER).read_text())["task"]), "test", 12)
    assert run.questions()["prompt"].tolist() == [q.prompt for q in questions]
    expected = checkpoint_answers(out / "backbone", checkpoint, questions, [1, 2])
    if loud:
        assert expected[1] != expected[2]  # the state stream matters here, so the comparison below can fail
    generations = run.generations()
    tokenizer = AutoTokenizer.from_pretrained(out / "backbone")
    for depth in (1, 2):
        rows = generations[generations["depth"] == depth].sort_values("question_id")
        recorded = tokenizer.convert_ids_to_tokens([int(ids[0]) for ids in rows["token_ids"]])
        assert recorded == expected[depth]
        assert rows["correct"].tolist() == [a == q.answer for a, q in zip(expected[depth], questions)]


def test_a_bad_out_is_one_error_line_and_nothing_is_written(organism, tmp_path, capsys):
    out, _ = organism
    a_file = tmp_path / "file"
    a_file.write_text("x")
    fails_with_one_error_line(capsys, organism_main, ["train-sst", "--out", str(a_file), *TINY], "is a file")
    pretrained = save_tiny_model(tmp_path / "pretrained", "gemma3")
    before = sorted(p.name for p in pretrained.iterdir())
    fails_with_one_error_line(capsys, organism_main, ["train-sst", "--out", str(pretrained), *TINY], "holds a model")
    assert sorted(p.name for p in pretrained.iterdir()) == before
    listing = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    fails_with_one_error_line(capsys, organism_main, ["train-sst", "--out", str(out), *TINY, "--sst-steps", "5"],
                              "trained with other settings (sst_steps)")
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == listing
    fails_with_one_error_line(capsys, organism_main, ["train-sst", "--out", str(tmp_path / "x"), "--sst-steps", "0"],
                              "--sst-steps must be at least 1")
    fails_with_one_error_line(capsys, organism_main, ["train-sst", "--out", str(tmp_path / "y"), "--max-hops", "9"],
                              "cannot hold a 9-hop chain")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
