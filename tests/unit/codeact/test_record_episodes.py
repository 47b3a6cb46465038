"""record --protocol codeact end to end on the scripted model: the run directory's per-turn rows, episodes.parquet,
per-turn shards from the passes that produced the tokens, resume after kill -9 mid-episode, and the report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM

from sst_interp.model.sst import SSTModel
from sst_interp.sandbox.cgroup import memory_cap
from sst_interp.store import Run
from tests.unit.codeact.run_scripted import record_scripted
from tests.unit.codeact.scripted import SCRIPTS

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def recorded(scripted_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("codeact") / "run"
    accuracy = record_scripted(str(scripted_dir), str(out))
    return out, accuracy


def test_run_directory_holds_turn_rows_and_episodes(recorded):
    out, accuracy = recorded
    assert accuracy == {1: 1.0, 2: 1.0}
    run = Run.open(out)
    assert run.protocol == "codeact" and run.manifest["episode"]["max_turns"] == 4
    assert run.manifest["episode"]["action_tokens"] == {"<execute>": 120, "</execute>": 121}
    # the sandbox's memory cap names the mechanism this host offers (issue 32 item 3)
    assert run.manifest["sandbox"]["memory_cap"].startswith("cgroup v2 memory.max" if memory_cap().cgroup else
                                                            "no cgroup (")
    gens = run.generations()
    for name in ("code", "tool_output", "tool_status"):
        assert name in gens.columns
    episodes = run.episodes().set_index(["question_id", "depth"])
    assert len(episodes) == 6
    for depth in (1, 2):
        for script in SCRIPTS:
            rows = gens[(gens["question_id"] == script.question_id) & (gens["depth"] == depth)].sort_values("turn")
            assert rows["turn"].tolist() == list(range(len(script.turns)))
            assert rows["text"].tolist() == list(script.turns)
            assert rows["correct"].all() and (rows["chosen_depth"] == depth).all()
            episode = episodes.loc[(script.question_id, depth)]
            assert episode["n_turns"] == len(script.turns) and bool(episode["correct"])
    mul = episodes.loc[("mul", 1)]
    assert mul["stop_reason"] == "finish_session" and mul["final_answer"] == "42" and mul["grader"] == "exact"
    assert episodes.loc[("err", 2), "stop_reason"] == "no_code"
    err = gens[(gens["question_id"] == "err") & (gens["depth"] == 1)].sort_values("turn")
    assert err["tool_status"].tolist() == ["ok", "error", "none"]
    assert err["code"].tolist()[0] == "import time\ntime.sleep(1.5)\nprint(2 + 3)" and err["code"].tolist()[2] == ""


def test_position0_of_every_turn_is_recorded_from_the_pass_that_chose_its_token(recorded, scripted_dir):
    out, _ = recorded
    run = Run.open(out)
    gens = run.generations().set_index(["question_id", "depth", "turn"])
    backbone = AutoModelForCausalLM.from_pretrained(scripted_dir, dtype=torch.float32).eval()
    sst = SSTModel.from_backbone(backbone)
    norm = backbone.get_decoder().norm
    checked = 0
    for depth in (1, 2):
        logit_blocks = {(b.question_id, b.turn): b for b in run.logits(depth)}
        for block in run.hidden(depth):
            tokens = list(gens.loc[(block.question_id, depth, block.turn), "token_ids"])
            assert block.positions[0] == 0 and block.values.shape[1:] == (depth, 2, 64)
            # The last layer's output at position 0, final iteration, through the final norm and the LM head,
            # gives the turn's first token and the recorded log-probs: the state and the token share one pass.
            with torch.no_grad():
                logits = sst.lm_logits(norm(torch.from_numpy(block.values[0, -1, -1])[None, None]))[0, 0]
            logprobs = torch.log_softmax(logits.double(), -1)
            assert int(logits.argmax()) == tokens[0]
            lo = logit_blocks[(block.question_id, block.turn)]
            assert int(lo.argmax[0, -1]) == tokens[0]
            ids = torch.as_tensor(lo.top_ids[0, -1].astype(np.int64))
            np.testing.assert_allclose(logprobs[ids].numpy(), lo.top_logprobs[0, -1], atol=1e-4)
            checked += 1
    assert checked == 2 * sum(len(s.turns) for s in SCRIPTS)


def _frames(out: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    run = Run.open(out)
    key = ["question_id", "depth", "turn"]
    gens = run.generations().sort_values(key).reset_index(drop=True)
    episodes = run.episodes().sort_values(["question_id", "depth"]).reset_index(drop=True)
    hidden = {(d, b.question_id, b.turn): b.values for d in run.depths for b in run.hidden(d)}
    return gens, episodes, hidden


def test_resume_after_kill_mid_episode_equals_an_uninterrupted_run(scripted_dir, tmp_path):
    clean = tmp_path / "clean"
    record_scripted(str(scripted_dir), str(clean), batch_size=1)
    out = tmp_path / "killed"
    command = [sys.executable, "-m", "tests.unit.codeact.run_scripted", str(scripted_dir), str(out), "1"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    child = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True)
    manifest = out / "manifest.json"
    deadline = time.monotonic() + 120
    killed_with = None
    while time.monotonic() < deadline and child.poll() is None:
        if manifest.exists():
            status = json.loads(manifest.read_text()).get("status", {})
            # "mul" is committed; the next episode ("err", which sleeps 1.5 s in its sandbox) is running.
            if status.get("1") == ["mul"]:
                killed_with = dict(status)
                os.killpg(child.pid, signal.SIGKILL)
                break
        time.sleep(0.05)
    child.wait(timeout=30)
    assert killed_with == {"1": ["mul"]}, child.stderr.read().decode()[-2000:]
    assert Run.open(out).episodes()["question_id"].tolist() == ["mul"]
    # No sandbox survives its killed parent (--die-with-parent).
    time.sleep(0.5)
    leftover = subprocess.run(["pgrep", "-f", "time.sleep\\(1.5\\)"], capture_output=True, text=True).stdout
    assert leftover.strip() == ""
    record_scripted(str(scripted_dir), str(out), batch_size=1)
    gens_a, episodes_a, hidden_a = _frames(clean)
    gens_b, episodes_b, hidden_b = _frames(out)
    columns = ["question_id", "depth", "turn", "text", "stop_reason", "code", "tool_output", "tool_status", "correct"]
    pd.testing.assert_frame_equal(gens_a[columns], gens_b[columns])
    pd.testing.assert_frame_equal(episodes_a, episodes_b)
    assert hidden_a.keys() == hidden_b.keys()
    for key in hidden_a:
        np.testing.assert_array_equal(hidden_a[key], hidden_b[key])


def test_report_works_on_a_multi_turn_run_and_says_how_many_turns(recorded, tmp_path, capsys):
    from sst_interp.cli.report import main as report_main

    out, _ = recorded
    report_main(["--run", str(out), "--out", str(tmp_path / "report")])
    printed = capsys.readouterr().out
    assert "0 failed" in printed
    page = (tmp_path / "report" / "index.html").read_text()
    # 2 depths x (2 + 3 + 1) turns in 6 episodes
    assert "<td>codeact</td>" in page and "12 in 6 episodes (mean 2.00, max 3)" in page


def test_episode_conduct_counts_the_scripted_episodes(recorded):
    """Planted truth: mul acts and finishes; err acts (then answers in text); text never opens a block."""
    from sst_interp import study

    out, _ = recorded
    conduct = study.open(out).episode_conduct().set_index("depth")
    for depth in (1, 2):
        row = conduct.loc[depth]
        assert row["episodes"] == 3
        assert row["first_turn_action"] == pytest.approx(2 / 3)
        assert row["finished"] == pytest.approx(1 / 3)
        assert row["accuracy"] == pytest.approx(1.0)
        assert row["mean_model_turns"] == pytest.approx((2 + 3 + 1) / 3)


def test_well_formed_action_needs_open_code_and_closing_token():
    from sst_interp.analyses.episodes import well_formed_action

    assert well_formed_action([5, 120, 7, 8, 121], "execute", 120, 121)
    assert not well_formed_action([120, 121], "execute", 120, 121)  # no code between the tokens
    assert not well_formed_action([7, 8, 121], "execute", 120, 121)  # closed a block it never opened
    assert not well_formed_action([120, 7, 8], "max_new_tokens", 120, 121)  # never closed
