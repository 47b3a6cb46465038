"""The explorer's JSON endpoints against the Run API and a synthetic run's planted truth (no browser)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from sst_interp.analyses.basins import classify_positions
from sst_interp.analyses.hidden_pass import l2_deltas
from sst_interp.store import Run
from tests.unit.explore.conftest import client_for
from tests.unit.reporting.builders import CORRECT
from tests.unit.store.test_store_integrity import flip_page


def test_question_list_holds_the_planted_outcomes(planted):
    root, truth = planted
    body = client_for(root / "sst", baseline=root / "base").get("/api/questions").json()
    rows = {r["question_id"]: r for r in body["rows"]}
    assert list(rows) == truth.question_ids
    baseline_correct = np.arange(len(CORRECT)) % 2 == 0  # write_baseline_run: correct on every even question
    for i, q in enumerate(truth.question_ids):
        row = rows[q]
        assert row["correct"] == {str(d): bool(CORRECT[i, d - 1]) for d in (1, 2, 3, 4)}
        first = np.flatnonzero(CORRECT[i])
        assert row["staged_depth"] == (int(first[0]) + 1 if first.size else 4)
        # app:halting_training: a timestep exists at depths d <= c (the correct depth); MUST HALT at d = c when flat
        # depth c + 1 fails
        c = int(first[0]) + 1 if first.size else None
        assert row["must_halt"] == ([c] if c is not None and c < 4 and not CORRECT[i, c] else [])
        assert row["overthinks"] == [d for d in (1, 2, 3, 4) if baseline_correct[i] and not CORRECT[i, d - 1]]
        assert row["recoveries"] == [d for d in (1, 2, 3, 4) if not baseline_correct[i] and CORRECT[i, d - 1]]
    assert body["meta"]["reference"].startswith("baseline base")


def test_filters_select_exactly_the_matching_questions(planted):
    root, truth = planted
    client = client_for(root / "sst")
    ids = np.array(truth.question_ids)

    def shown(query):
        return [r["question_id"] for r in client.get("/api/questions?" + query).json()["rows"]]

    assert shown("correct=2:true,4:false") == list(ids[CORRECT[:, 1] & ~CORRECT[:, 3]])
    halts = [bool(np.flatnonzero(c).size) and np.flatnonzero(c)[0] < 3 and not c[np.flatnonzero(c)[0] + 1]
             for c in CORRECT]
    assert shown("must_halt=true") == list(ids[halts])
    # without a baseline the reference is flat depth 1
    over = (CORRECT[:, :1] & ~CORRECT).any(axis=1)
    assert shown("change=overthink") == list(ids[over])
    assert shown("staged=3") == list(ids[[np.flatnonzero(c)[:1].tolist() == [2] for c in CORRECT]])
    assert shown("search=SYN0007") == ["syn0007"]
    assert shown("search=question 11.") == ["syn0011"]  # the prompt text
    assert client.get("/api/questions?change=sideways").status_code == 400


def test_question_view_tokens_follow_the_recorded_logits(planted):
    root, truth = planted
    run = Run.open(root / "sst")
    client = client_for(root / "sst")
    q = "syn0003"
    view = client.get(f"/api/question/{q}").json()
    gens = run.generations().set_index(["question_id", "depth"])
    for column in view["depths"]:
        depth = column["depth"]
        (turn,) = column["turns"]
        assert [t["id"] for t in turn["tokens"]] == list(gens.loc[(q, depth), "token_ids"])
        block = next(run.logits(depth, [q]))
        for token in turn["tokens"]:
            p = token["position"]
            if p not in block.positions.tolist():
                assert "argmax" not in token
                continue
            j = block.positions.tolist().index(p)
            assert token["argmax"] == block.argmax[j].tolist()
            if p < truth.winners.shape[1]:  # the planted ranks: the argmax changed iff a later rank is not 0
                assert token["changed"] == bool((truth.winners[3, p, :depth] != 0).any())
            assert token["entropy"] == pytest.approx(block.entropy[j].tolist(), abs=1e-4)
    for key, per_turn in view["divergence"].items():
        a, b = map(int, key.split("-"))
        expected = truth.first_divergence(3, a, b)
        assert per_turn["0"] == (-1 if expected is None else expected)


def test_token_hover_is_the_recorded_top_k(planted):
    root, _ = planted
    run = Run.open(root / "sst")
    detail = client_for(root / "sst").get("/api/token?q=syn0002&depth=3&turn=0&pos=1").json()
    block = next(run.logits(3, ["syn0002"]))
    j = block.positions.tolist().index(1)
    for i in range(3):
        assert [t["id"] for t in detail["top"][i]] == block.top_ids[j, i, :10].tolist()
        assert [t["logprob"] for t in detail["top"][i]] == pytest.approx(block.top_logprobs[j, i, :10], abs=1e-5)
    assert detail["tracked"]["ids"] == block.top_ids[j, 0, :10].tolist()
    assert np.array(detail["tracked"]["logprobs"]) == pytest.approx(block.tracked_logprobs[j, :, :10], abs=1e-5)


@pytest.mark.parametrize("position", [0, 3, 8])  # 8 lies beyond the 6 full positions: read from the sketches
def test_position_view_overlap_is_the_planted_overlap(planted, position):
    root, truth = planted
    view = client_for(root / "sst").get(f"/api/position?q=syn0004&depth=4&turn=0&pos={position}").json()
    assert view["states"] == ("hidden" if position < 6 else "sketch")
    expected = np.stack([truth.overlap(i, i + 1)[4, position] for i in (1, 2, 3)])  # [3 transitions, L]
    assert np.array(view["overlap"]) == pytest.approx(expected, abs=1e-6)
    regime = view["regime"]
    across = truth.overlap(1, 4)[4, position]  # depth 1 iteration 1 vs depth 4 iteration 4: one planted trajectory
    assert np.array(regime["per_layer"]) == pytest.approx(across, abs=1e-6)
    assert regime["low_overlap"] == bool(classify_positions(across[None, None], regime["threshold"])[0, 0])
    if position < 6:
        values = next(Run.open(root / "sst").hidden(4, ["syn0004"], positions=[position])).values[0]
        assert np.array(view["l2_delta"]) == pytest.approx(l2_deltas(np.swapaxes(values, 0, 1)).T, rel=1e-5)
    else:
        assert view["l2_delta"] is None


def test_bad_requests_are_400_with_the_reason(planted):
    root, _ = planted
    client = client_for(root / "sst")
    assert client.get("/api/question/nope").json() == {"error": f"question 'nope' is not recorded in {root / 'sst'}"}
    assert client.get("/api/position?q=syn0001&depth=9&pos=0").status_code == 400
    assert "integer" in client.get("/api/token?q=syn0001&depth=x&pos=0").json()["error"]
    assert client.get("/api/halting?q=syn0001").json()["available"] is False


def test_a_damaged_shard_names_the_file_and_the_rest_keeps_serving(planted, tmp_path):
    root, _ = planted
    run_dir = tmp_path / "run"
    shutil.copytree(root / "sst", run_dir)
    client = client_for(run_dir)
    assert client.get("/api/question/syn0000").status_code == 200
    shard = sorted((run_dir / "logits" / "depth=2").glob("*.parquet"))[0]
    flip_page(shard, "top_logprobs")
    client = client_for(run_dir)  # a fresh server: nothing cached
    response = client.get("/api/question/syn0000")
    assert response.status_code == 500
    body = response.json()
    assert body["damaged"] is True and str(shard) in body["error"]
    assert "rerun the same record command" in body["error"] and "sst_interp.store verify" in body["error"]
    # the depth-2 logits are damaged, the hidden states are not: the position view of depth 4 still answers
    assert client.get("/api/position?q=syn0000&depth=4&pos=0").status_code == 200
    assert client.get("/api/questions").status_code == 200


def test_a_run_being_recorded_shows_what_is_committed(planted, tmp_path):
    root, _ = planted
    run_dir, aside = tmp_path / "run", tmp_path / "aside"
    shutil.copytree(root / "sst", run_dir)
    full = (run_dir / "manifest.json").read_text()
    # the run as it stands before its depth-4 batch commits: no depth-4 shards, no depth-4 entry in the manifest
    manifest = json.loads(full)
    del manifest["batches"]["4"]
    manifest["status"]["4"] = []
    manifest["next_batch"] = 4
    for kind in ("hidden", "logits", "sketch"):
        shutil.move(run_dir / kind / "depth=4", aside / kind)
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    client = client_for(run_dir)
    rows = client.get("/api/questions").json()["rows"]
    assert all("4" not in r["correct"] and r["staged_depth"] is None for r in rows)
    assert client.get("/api/run").json()["recorded"] == {"1": 12, "2": 12, "3": 12, "4": 0}
    assert [d["depth"] for d in client.get("/api/question/syn0001").json()["depths"]] == [1, 2, 3]
    for kind in ("hidden", "logits", "sketch"):  # the batch commits: the same server shows it at the next request
        shutil.move(aside / kind, run_dir / kind / "depth=4")
    (run_dir / "manifest.json").write_text(full)
    rows = client.get("/api/questions").json()["rows"]
    assert all("4" in r["correct"] for r in rows)
    assert client.get("/api/position?q=syn0001&depth=4&pos=0").status_code == 200


def test_halting_view_reproduces_the_probes_own_halting_depths(planted, tmp_path):
    from sst_interp.cli.probe import main as probe_main

    root, truth = planted
    probe_main(["train", "--run", str(root / "sst"), "--out", str(tmp_path / "probe")])
    chosen = pd.read_csv(tmp_path / "probe" / "halting_probe_questions.csv").set_index("question_id")["chosen_depth"]
    client = client_for(root / "sst", probe=tmp_path / "probe")
    assert client.get("/api/run").json()["probe"] == str(tmp_path / "probe")
    for qid in truth.question_ids:
        view = client.get(f"/api/halting?q={qid}").json()
        assert view["available"] and view["layer"] == json.loads((tmp_path / "probe" / "probe.json").read_text())["layer"]
        # the policy halts after the first iteration d whose position-0 state scores above the threshold
        # (app:halting_eval; the state after iteration d is the last iteration of the flat depth-d run)
        above = [d for d in (1, 2, 3) if view["depths"][str(d)]["0"][d - 1] > view["threshold"]]
        assert (above[0] if above else 4) == chosen[qid], qid
        assert [len(view["depths"][str(d)]["0"]) for d in (1, 2, 3, 4)] == [1, 2, 3, 4]


def test_report_artefacts_are_linked_and_served(planted, tmp_path):
    from sst_interp.cli.report import main as report_main

    root, _ = planted
    report_main(["--run", str(root / "sst"), "--out", str(tmp_path / "report"), "--only", "tab_overthinking"])
    client = client_for(root / "sst", report=tmp_path / "report")
    links = client.get("/api/run").json()["report"]
    assert [link["name"] for link in links] == ["index.html", "tab_overthinking.csv", "tab_overthinking.md",
                                                "tab_overthinking.tex"]
    served = client.get(links[1]["href"])
    assert served.status_code == 200 and served.content == (tmp_path / "report" / "tab_overthinking.csv").read_bytes()


def test_completion_episodes_equal_the_run_api(planted):
    from sst_interp.explore.source import completion_episodes

    root, _ = planted
    run = Run.open(root / "sst")
    pd.testing.assert_frame_equal(completion_episodes(run.generations()), run.episodes())


def test_every_glossary_link_of_the_page_has_its_entry(planted):
    """The page's "?" links open /glossary at an entry that exists, generated from the one glossary declaration."""
    import re

    from sst_interp.kernels.glossary import TERMS

    client = client_for(planted[0] / "sst")
    glossary = client.get("/glossary")
    assert glossary.status_code == 200
    assert set(re.findall(r'<dt id="([a-z0-9-]+)">', glossary.text)) == {term.anchor for term in TERMS}
    links = set(re.findall(r'href="/glossary#([a-z0-9-]+)"', client.get("/").text))
    assert {"must-halt", "overthinking", "top-k-overlap", "gmm-crossover", "halting-probe"} <= links
    assert links <= {term.anchor for term in TERMS}
