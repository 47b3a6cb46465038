"""The explorer on a recorded CodeACT run (the scripted model through the real sandbox): turn by turn with code,
tool output and tool status, in the endpoints and in the browser."""

from __future__ import annotations

import os

import pytest
from starlette.testclient import TestClient

from sst_interp.explore.config import ExploreConfig
from sst_interp.explore.server import create_app, open_explorer
from sst_interp.store import Run
from tests.unit.codeact.run_scripted import record_scripted
from tests.unit.explore.browser import CHROMIUM, browser, chromedriver, served


@pytest.fixture(scope="module")
def recorded(scripted_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("codeact-explore") / "run"
    record_scripted(str(scripted_dir), str(out))
    return out


def test_question_view_is_turn_by_turn_with_code_and_tool_output(recorded, scripted_dir):
    from tokenizers import Tokenizer

    run = Run.open(recorded)
    client = TestClient(create_app(open_explorer(ExploreConfig(run=recorded, fit_gmm=False))))
    tok = Tokenizer.from_file(str(scripted_dir / "tokenizer.json"))
    gens = run.generations()
    episodes = run.episodes().set_index(["question_id", "depth"])
    rows = {r["question_id"]: r for r in client.get("/api/questions").json()["rows"]}
    for qid in run.question_ids():
        assert rows[qid]["turns"] == {str(d): int(episodes.loc[(qid, d), "n_turns"]) for d in run.depths}
        view = client.get(f"/api/question/{qid}").json()
        assert view["protocol"] == "codeact"
        for column in view["depths"]:
            expected = gens[(gens["question_id"] == qid) & (gens["depth"] == column["depth"])].sort_values("turn")
            assert column["n_turns"] == len(expected) == len(column["turns"])
            for turn, (_, row) in zip(column["turns"], expected.iterrows()):
                assert turn["turn"] == row["turn"]
                for field in ("code", "tool_output", "tool_status"):
                    assert turn[field] == (None if row[field] is None else str(row[field]))
                assert [t["id"] for t in turn["tokens"]] == list(row["token_ids"])
                # the tokenizer's pieces; the action tokens by their names; an id it does not know as the id
                actions = {int(i): name for name, i in run.manifest["episode"]["action_tokens"].items()}
                pieces = [actions.get(int(i), tok.id_to_token(int(i))) for i in row["token_ids"]]
                assert [t["piece"] for t in turn["tokens"]] == \
                    [f"\u27e8{i}\u27e9" if p is None else p.replace("\u2581", " ")
                     for i, p in zip(row["token_ids"], pieces)]
    multi = [q for q in run.question_ids() if max(rows[q]["turns"].values()) >= 2]
    assert multi and [r["question_id"] for r in client.get("/api/questions?min_turns=2").json()["rows"]] == multi


@pytest.mark.skipif(not (os.path.exists(CHROMIUM) and chromedriver()), reason="needs chromium and chromium-driver")
def test_the_browser_shows_each_turns_code_and_status(recorded):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    run = Run.open(recorded)
    gens = run.generations()
    qid = gens.loc[gens["tool_status"].notna(), "question_id"].iloc[0]
    expected = gens[(gens["question_id"] == qid) & (gens["depth"] == 1)].sort_values("turn")
    with served(ExploreConfig(run=recorded, fit_gmm=False)) as url, browser() as driver:
        driver.get(f"{url}?q={qid}")
        WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, '.depth-col[data-depth="1"] .turn'))
        turns = driver.find_elements(By.CSS_SELECTOR, '.depth-col[data-depth="1"] .turn')
        assert len(turns) == len(expected)
        for node, (_, row) in zip(turns, expected.iterrows()):
            blocks = [p.get_attribute("textContent") for p in node.find_elements(By.CSS_SELECTOR, ".tool pre")]
            want = [] if row["code"] is None else [row["code"]]
            if row["tool_status"] is not None:
                want.append(row["tool_output"] or "")
                status = node.find_element(By.CSS_SELECTOR, ".tool span").get_attribute("textContent")
                assert status == row["tool_status"]
            assert blocks == want
