"""record -> report on the real default backbone (Gemma 3 270M), both protocols, and the CodeACT tokenisation on
the real Gemma 3 tokenizer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sst_interp.codeact.episode import end_of_turn_id
from sst_interp.codeact.format import ActionFormat, encode_with_actions
from sst_interp.cli.record import main as record_main, run as record_run
from sst_interp.cli.report import main as report_main
from sst_interp.store import Run

pytestmark = pytest.mark.integration

from tests.paths import BENCHMARK_FIXTURES as SHARED  # real first rows of GSM8K test, in the repository


def test_codeact_prompts_tokenise_as_the_training_traces(default_sst):
    _, tok = default_sst
    fmt = ActionFormat()
    prompt = encode_with_actions(fmt.first_turn("Solve it.", "1+1?"), tok, fmt.action_tokens)[0]
    assert prompt[0] == tok.bos_token_id and prompt.count(tok.convert_tokens_to_ids("<start_of_turn>")) == 2
    assert tok.convert_ids_to_tokens(prompt[-2:]) == ["model", "\n\n"]  # the merged newlines before <execute>
    trace = encode_with_actions("<start_of_turn>model\n\n<execute>\nx = 1\n</execute><end_of_turn>", tok,
                                fmt.action_tokens)[0]
    assert trace[:4] == prompt[-3:] + [262140] and trace[-2:] == [262141, 106]
    assert end_of_turn_id(tok, fmt) == 106
    assert tok.convert_ids_to_tokens([262140, 262141])[0].startswith("<unused")  # reserved, untrained rows


@pytest.mark.parametrize("protocol", ["completion", "codeact"])
def test_record_then_report_on_the_default_backbone(protocol, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["--depths", "1,2", "--out", str(out), "--device", "cpu", "--full-positions", "2",
            "--sketch-positions", "4", "--top-k", "8"]
    if protocol == "codeact":
        argv += ["--questions", "gsm8k", "--data", str(SHARED / "gsm8k"), "--protocol", "codeact", "--limit", "2",
                 "--max-new-tokens", "12", "--max-turns", "2"]
    else:
        argv += ["--questions", "demo", "--limit", "4", "--max-new-tokens", "6"]
    accuracy = record_run(argv)
    assert set(accuracy) == {1, 2}
    run = Run.open(out)
    assert run.protocol == protocol and run.num_layers == 18 and run.hidden_size == 640
    episodes = run.episodes()
    assert len(episodes) == (4 if protocol == "codeact" else 8)
    if protocol == "codeact":
        assert set(episodes["stop_reason"]) <= {"finish_session", "no_code", "max_turns", "token_budget"}
        assert (out / "episodes.parquet").is_file()
    capsys.readouterr()
    report_main(["--run", str(out), "--out", str(tmp_path / "report"), "--quiet"])
    page = (tmp_path / "report" / "index.html").read_text()
    assert f"<td>{protocol}</td>" in page
    assert "tab_staged_breakdown" in page


def test_codeact_record_without_checkpoint_runs_the_shipped_demo_sst(tmp_path, capsys):
    """One real episode with the packaged demo-codeact SST (the codeact default): it opens an <execute> block, the
    sandbox runs the code, and the episode ends with finish_session (measured here on GSM8K test question 0)."""
    from sst_interp.checkpoints import named_checkpoint_folder

    out = tmp_path / "run"
    record_main(["--questions", "gsm8k", "--data", str(SHARED / "gsm8k"), "--protocol", "codeact", "--limit", "1",
                 "--depths", "1", "--max-new-tokens", "128", "--max-turns", "3", "--out", str(out), "--device", "cpu",
                 "--full-positions", "2", "--sketch-positions", "4", "--top-k", "8"])
    printed = capsys.readouterr().out
    assert "the shipped CodeACT demo SST" in printed
    run = Run.open(out)
    assert run.manifest["identity"]["checkpoint"] == str(named_checkpoint_folder("demo-codeact").resolve())
    episode = run.episodes().iloc[0]
    assert episode["stop_reason"] == "finish_session" and episode["n_turns"] == 2
    turns = run.generations().sort_values("turn")
    first = list(turns.iloc[0]["token_ids"])
    assert first[0] == 262140 and first[-1] == 262141  # <execute> ... </execute>
    assert turns.iloc[0]["tool_status"] == "ok" and "print(" in turns.iloc[0]["code"]
    assert turns.iloc[1]["code"].startswith("finish_session(")
