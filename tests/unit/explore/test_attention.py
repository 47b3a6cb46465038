"""The explorer's attention endpoint against ``Run.attention`` on the hops organism recorded with ``--attention``
(every key, and the 3 heaviest), the key texts against the organism's tokenizer, and the context rebuilt across
CodeACT turns."""

from __future__ import annotations

import numpy as np
import pytest

from sst_interp.cli.record import main as record_main
from sst_interp.explore.attention import TOOL_PIECE, context_layout
from sst_interp.organism.tokenizer import hops_tokenizer
from sst_interp.store import Run
from tests.unit.explore.conftest import client_for

ORGANISM = ["--model", "hops-organism", "--questions", "hops", "--source-option", "n=4", "--depths", "1,2",
            "--device", "cpu", "--attention", "all"]


@pytest.fixture(scope="module")
def organism_runs(tmp_path_factory):
    """``{"all": every key, "top3": the 3 heaviest keys}``: the organism's 4 hops questions at depths 1, 2."""
    root = tmp_path_factory.mktemp("attention")
    assert record_main([*ORGANISM, "--out", str(root / "all")]) == 0
    assert record_main([*ORGANISM, "--attention-top-k", "3", "--out", str(root / "top3")]) == 0
    return {"all": root / "all", "top3": root / "top3"}


@pytest.mark.parametrize("kind", ["all", "top3"])
def test_the_weights_are_run_attentions_and_the_keys_are_the_prompts_tokens(organism_runs, kind):
    run = Run.open(organism_runs[kind])
    client = client_for(organism_runs[kind])
    tokenizer = hops_tokenizer()
    prompts = run.questions().set_index("question_id")["prompt"]
    answers = run.generations().set_index(["question_id", "depth"])["token_ids"]
    for qid in run.question_ids(2):
        stored = run.attention(2, [qid], turn=0, positions=[0])
        seen = set()
        for iteration in (1, 2):
            view = client.get(f"/api/attention?q={qid}&depth=2&turn=0&pos=0&it={iteration}").json()
            assert view["available"] and view["iterations"] == [1, 2] and view["iteration"] == iteration
            assert view["top_k"] == (3 if kind == "top3" else None)
            # the keys: the prompt's tokens, as the organism's tokenizer splits it (the answer column sees the prompt)
            tokens = tokenizer.convert_ids_to_tokens(tokenizer(prompts[qid])["input_ids"])
            assert view["keys"] == tokens and view["key_kinds"] == ["prompt"] * len(tokens)
            assert view["keys_note"] is None
            assert view["query_token"] == tokenizer.convert_ids_to_tokens([int(answers[(qid, 2)][0])])[0]
            rows = stored[stored["iteration"] == iteration]
            assert [(r["layer"], r["head"]) for r in view["rows"]] == \
                sorted(set(zip(rows["layer"].tolist(), rows["head"].tolist())))
            for row in view["rows"]:
                want = rows[(rows["layer"] == row["layer"]) & (rows["head"] == row["head"])]
                assert row["keys"] == want["key_position"].tolist()
                assert np.array(row["weights"], dtype=np.float32).tolist() == want["weight"].tolist()  # exact
                assert row["remaining_mass"] == float(want["remaining_mass"].iloc[0])
                heaviest = want.sort_values("weight", ascending=False, kind="stable").head(3)
                assert [h["key"] for h in row["heaviest"]] == heaviest["key_position"].tolist()
                assert [h["piece"] for h in row["heaviest"]] == [tokens[k] for k in heaviest["key_position"]]
                if kind == "top3":
                    assert len(row["keys"]) == 3
                    assert row["remaining_mass"] == pytest.approx(1 - sum(row["weights"]), abs=1e-6)
                seen.add((iteration, row["layer"], row["head"]))
        assert len(seen) == len(stored.groupby(["iteration", "layer", "head"]))  # every recorded head shown


def test_only_the_asked_rows_are_read_and_none_at_start(organism_runs, monkeypatch):
    calls = []
    original = Run.attention

    def spy(self, *args, **kwargs):
        calls.append((args, kwargs))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Run, "attention", spy)
    client = client_for(organism_runs["all"])
    client.get("/api/questions")
    qid = Run.open(organism_runs["all"]).question_ids(2)[1]
    client.get(f"/api/question/{qid}")
    client.get(f"/api/position?q={qid}&depth=2&turn=0&pos=0")
    assert calls == []  # opening the run and the other views read no attention
    for iteration in (1, 2, 1):  # stepping through the iterations reads the position once
        assert client.get(f"/api/attention?q={qid}&depth=2&turn=0&pos=0&it={iteration}").status_code == 200
    assert calls == [((2, [qid]), {"turn": 0, "positions": [0]})]


def test_a_run_without_attention_says_how_to_record_it(planted, organism_runs):
    root, truth = planted
    view = client_for(root / "sst").get(f"/api/attention?q={truth.question_ids[0]}&depth=4&turn=0&pos=0").json()
    assert view == {"available": False, "message": "this run recorded no attention; record it with python -m "
                    "sst_interp.record ... --attention all (docs/format.md, attention/)"}
    client = client_for(organism_runs["all"])
    qid = Run.open(organism_runs["all"]).question_ids(2)[0]
    for query, reason in ((f"q={qid}&depth=2&pos=0&it=3", "iteration 3 is not recorded"),
                          (f"q={qid}&depth=2&pos=1", "has no position 1 in turn 0"),
                          (f"q={qid}&depth=5&pos=0", "depth 5 is not in this run"),
                          (f"q={qid}&depth=2&pos=0&it=x", "must be an integer")):
        answer = client.get(f"/api/attention?{query}")
        assert answer.status_code == 400 and reason in answer.json()["error"], (query, answer.text)


def test_the_context_runs_across_turns_with_the_tool_responses_by_length():
    pieces = lambda ids: [f"t{i}" for i in ids]  # noqa: E731
    turns = [([5, 6, 7], 2), ([8, 9], 0)]
    layout = context_layout([1, 2], 2, turns, 1, 1, pieces)
    # prompt, turn 0's tokens, its tool response (2 tokens, not stored), then turn 1's tokens before position 1
    assert layout.pieces == ["t1", "t2", "t5", "t6", "t7", TOOL_PIECE, TOOL_PIECE, "t8"]
    assert layout.kinds == ["prompt"] * 2 + ["generated"] * 3 + ["tool"] * 2 + ["generated"]
    assert "tool" in layout.note
    # turn 0, position 2: the prompt and the first two generated tokens
    assert context_layout([1, 2], 2, turns, 0, 2, pieces).pieces == ["t1", "t2", "t5", "t6"]
    # a re-encoded prompt that disagrees with the recorded length is shown by index, and says so
    shifted = context_layout([1, 2, 3], 2, turns, 0, 0, pieces)
    assert shifted.pieces == ["#0", "#1"] and "3 tokens, not the 2 recorded" in shifted.note
    assert context_layout(None, 2, turns, 0, 1, pieces).pieces == ["#0", "#1", "t5"]

