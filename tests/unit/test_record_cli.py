"""record CLI: flags map to config fields; bad input is one line on stderr and exit code 2, nothing touched."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from sst_interp.cli.record import main, parse_args
from sst_interp.record import RecordOptions, staged_capacity



def _fails(capsys, argv, pattern):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert pattern in err[0], err[0]
    return err[0]


def test_every_flag_maps_to_a_field():
    args = parse_args(["--questions", "gsm8k", "--data", "x.jsonl", "--depths", "1,3", "--model", "m",
                       "--checkpoint", "c", "--no-demo-preset", "--max-new-tokens", "7", "--batch-size", "3",
                       "--dtype", "bfloat16", "--out", "o", "--full-positions", "4", "--sketch-positions", "5",
                       "--sketch-k", "9", "--top-k", "11", "--gates", "--limit", "2", "--ids", "a,b",
                       "--prompt-mode", "sequential", "--device", "cpu", "--source-option", "subset=main"])
    assert args == RecordOptions(questions="gsm8k", data="x.jsonl", depths=[1, 3], model="m", checkpoint="c",
                                 demo_preset=False, max_new_tokens=7, batch_size=3, dtype="bfloat16", out="o",
                                 full_positions=4, sketch_positions=5, sketch_k=9, top_k=11, gates=True, limit=2,
                                 ids=["a", "b"], prompt_mode="sequential", device="cpu",
                                 source_options={"subset": "main"})
    options = args
    assert isinstance(options, RecordOptions)
    assert options.ids == ["a", "b"] and options.source_options == {"subset": "main"} and options.depths == [1, 3]
    defaults = parse_args([])
    assert (defaults.questions, defaults.depths, defaults.full_positions, defaults.sketch_positions,
            defaults.top_k, defaults.demo_preset) == ("demo", [1, 2, 3, 4], 10, 512, 128, None)
    assert defaults.out_path() == Path("runs/demo")
    assert parse_args(["--source-option", "n=48", "--source-option", "seed=-3"]).source_options == {"n": 48, "seed": -3}
    assert parse_args(["--action-tokens", "</execute>=5,<execute>=4"]).action_tokens == (
        ("<execute>", 4), ("</execute>", 5))


@pytest.mark.parametrize("text, expected", [("1,2,3,4", [1, 2, 3, 4]), ("3", [3]), (" 2 , 5 ", [2, 5])])
def test_depth_lists_parse(text, expected):
    assert parse_args(["--depths", text]).depths == expected


@pytest.mark.parametrize("depths", ["0", "a", "1,,x", "2,-1", "", "1,1"])
def test_invalid_depth_lists(capsys, tmp_path, depths):
    _fails(capsys, ["--depths", depths, "--out", str(tmp_path / "r")], "depth")
    assert not (tmp_path / "r").exists()


def test_unknown_set_and_missing_file(capsys, tmp_path):
    _fails(capsys, ["--questions", "trivia", "--out", str(tmp_path / "r")], "unknown question set 'trivia'")
    line = _fails(capsys, ["--questions", "gsm8k", "--data", str(tmp_path / "nope.jsonl"),
                           "--out", str(tmp_path / "r")], "nope.jsonl")
    assert not (tmp_path / "r").exists(), line


def test_wrong_gpqa_password(capsys, tmp_path, shared_data):
    _fails(capsys, ["--questions", "gpqa", "--data", str(shared_data / "gpqa" / "dataset.zip"), "--source-option", "password=wrong",
                    "--out", str(tmp_path / "r")], "password")


def test_other_bad_values(capsys, tmp_path):
    out = ["--out", str(tmp_path / "r")]
    _fails(capsys, ["--batch-size", "0"] + out, "--batch-size")
    _fails(capsys, ["--dtype", "float16"] + out, "--dtype")
    _fails(capsys, ["--prompt-mode", "magic"] + out, "--prompt-mode")
    _fails(capsys, ["--checkpoint", "c", "--demo-preset"] + out, "--demo-preset")
    _fails(capsys, ["--source-option", "oops"] + out, "KEY=VALUE")
    _fails(capsys, ["--ids", "demo-000,nope"] + out, "nope")


def test_out_holding_something_else_is_refused_before_loading_a_model(capsys, tmp_path):
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("keep me")
    _fails(capsys, ["--out", str(other), "--model", str(tmp_path / "no-such-model")], "not an sst-interp run")
    assert (other / "todo.txt").read_text() == "keep me"
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"schema_version": 1, "identity": {"model": "x"}, "status": {}}))
    _fails(capsys, ["--out", str(run), "--model", str(tmp_path / "no-such-model")], "different identity")


def test_staged_capacity_counts_a_question_once_it_was_correct_at_any_lower_depth():
    correct = {1: {"a"}, 2: {"b"}, 3: {"a", "c"}, 4: set()}

    def matrix(questions: list[str]) -> pd.DataFrame:
        return pd.DataFrame({d: [q in correct[d] for q in questions] for d in (4, 3, 2, 1)}, index=questions)

    assert staged_capacity(matrix(["a", "b", "c", "d"])) == {1: 1, 2: 2, 3: 3, 4: 3}
    assert staged_capacity(matrix(["a", "d"])) == {1: 1, 2: 1, 3: 1, 4: 1}
