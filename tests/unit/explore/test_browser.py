"""The explorer in a real browser (headless Debian Chromium through chromium-driver, no browser download): open a
run, filter the list, click a question, hover a token, open a position, and check the numbers the page shows
against the Run API and the synthetic run's planted truth; then a tiny recorded run with its own tokenizer.

``SST_INTERP_SCREENSHOT=docs/explore.png`` also writes the screenshot the README shows;
``SST_INTERP_ATTENTION_SCREENSHOT=docs/img/explore-attention.png`` the attention panel docs/explorer.md shows;
``SST_INTERP_FEATURES_SCREENSHOT=docs/img/explore-features.png`` the features panel.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest

from sst_interp.analyses.basins import classify_positions
from sst_interp.explore.config import ExploreConfig
from sst_interp.store import Run
from tests.unit.conftest import FAST, save_tiny_model
from tests.unit.explore.browser import CHROMIUM, browser, chromedriver, served
from tests.unit.reporting.builders import CORRECT

pytestmark = [pytest.mark.timeout(180)]
if not (os.path.exists(CHROMIUM) and chromedriver()):
    pytestmark.append(pytest.mark.skip(reason="needs /usr/bin/chromium and chromedriver (apt-get install chromium "
                                              "chromium-driver; .ci/run installs them)"))

By = pytest.importorskip("selenium.webdriver.common.by").By


def _wait(driver, condition, seconds: float = 20):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, seconds).until(lambda d: condition(d))


def _rows(driver) -> list[str]:
    # read in one script call: the list re-renders while a filter's answer arrives
    return driver.execute_script(
        "return [...document.querySelectorAll('#qlist tr.qrow')].map(r => r.dataset.qid)")


def _hover(driver, selector: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).move_to_element(driver.find_element(By.CSS_SELECTOR, selector)).perform()


def test_the_planted_run_in_the_browser(planted, tmp_path):
    root, truth = planted
    run = Run.open(root / "sst")
    ids = np.array(truth.question_ids)
    config = ExploreConfig(run=root / "sst", baseline=root / "base")
    with served(config) as url, browser() as driver:
        driver.get(url)
        _wait(driver, lambda d: len(_rows(d)) == len(ids))
        # filter the list: overthinks against the baseline (correct on every even question)
        from selenium.webdriver.support.ui import Select

        Select(driver.find_element(By.ID, "filter-change")).select_by_value("overthink")
        base = np.arange(len(ids)) % 2 == 0
        expected = list(ids[(base[:, None] & ~CORRECT).any(axis=1)])
        _wait(driver, lambda d: _rows(d) == expected)
        assert "f_change=overthink" in driver.current_url
        # click a question
        qid = expected[0]
        qi = truth.question_ids.index(qid)
        driver.find_element(By.CSS_SELECTOR, f'#qlist tr.qrow[data-qid="{qid}"]').click()
        _wait(driver, lambda d: d.find_element(By.ID, "qtitle").text.startswith(qid))
        assert parse_qs(urlparse(driver.current_url).query)["q"] == [qid]
        columns = driver.find_elements(By.CSS_SELECTOR, ".depth-col")
        assert [int(c.get_attribute("data-depth")) for c in columns] == [1, 2, 3, 4]
        gens = run.generations().set_index(["question_id", "depth"])
        shown = driver.find_elements(By.CSS_SELECTOR, '.tok[data-depth="3"]')
        assert len(shown) == len(gens.loc[(qid, 3), "token_ids"])
        # tokens whose argmax changed across iterations are marked (planted: a later iteration-1 rank is not 0)
        for tok in shown[:6]:
            p = int(tok.get_attribute("data-pos"))
            assert ("changed" in tok.get_attribute("class")) == bool((truth.winners[qi, p, :3] != 0).any())
        # the first divergence between depths 1 and 4 is marked on both transcripts
        first = truth.first_divergence(qi, 1, 4)
        marked = driver.find_elements(By.CSS_SELECTOR, ".tok.div-mark")
        assert sorted((m.get_attribute("data-depth"), int(m.get_attribute("data-pos"))) for m in marked) == \
            ([] if first is None else [("1", first), ("4", first)])
        # hover a token: the top-K per iteration and the tracked log-probs of the recorded logits
        _hover(driver, '.tok[data-depth="3"][data-pos="1"]')
        _wait(driver, lambda d: d.find_element(By.ID, "tip").is_displayed()
              and d.find_elements(By.CSS_SELECTOR, '#tip-table[data-pos="1"] tr[data-iteration]'))
        block = next(run.logits(3, [qid]))
        j = block.positions.tolist().index(1)
        for i, row in enumerate(driver.find_elements(By.CSS_SELECTOR, "#tip-table tr[data-iteration]")):
            tops = row.find_elements(By.CSS_SELECTOR, "span.top")
            assert [int(t.get_attribute("data-id")) for t in tops] == block.top_ids[j, i, :10].tolist()
            assert [float(t.get_attribute("data-logprob")) for t in tops] == \
                pytest.approx(block.top_logprobs[j, i, :10], abs=1e-5)
        # open a position: the overlap heatmap is the planted overlap of consecutive iterations
        driver.find_element(By.CSS_SELECTOR, '.tok[data-depth="4"][data-pos="0"]').click()
        _wait(driver, lambda d: d.find_element(By.ID, "regime-status").text in ("low-overlap", "stable"))
        cells = driver.find_elements(By.CSS_SELECTOR, "#ov-table td[data-value]")
        shown_overlap = np.array([float(c.get_attribute("data-value")) for c in cells]).reshape(3, run.num_layers)
        planted_overlap = np.stack([truth.overlap(i, i + 1)[qi, 0] for i in (1, 2, 3)])
        assert shown_overlap == pytest.approx(planted_overlap, abs=1e-6)
        plotted = driver.execute_script("return document.getElementById('ov-heat').data[0].z")
        assert np.array(plotted) == pytest.approx(planted_overlap, abs=1e-6)
        # the regime mark: depth 1 iteration 1 vs depth 4 iteration 4 against the threshold the page names
        # read together: the verdict is redrawn when the run's GMM fit arrives, which may happen between two reads
        threshold, status = driver.execute_script(
            "return [document.getElementById('regime-plot').data[1].y[0], "
            "document.getElementById('regime-status').textContent]")
        across = truth.overlap(1, 4)[qi, 0]
        low = bool(classify_positions(across[None, None], threshold)[0, 0])
        assert status == ("low-overlap" if low else "stable")
        query = parse_qs(urlparse(driver.current_url).query)
        assert (query["depth"], query["turn"], query["pos"]) == (["4"], ["0"], ["0"])
        # the planted run recorded no attention: the panel says so in one line, and how to record it
        assert driver.find_element(By.ID, "attention-box").get_attribute("data-available") == "0"
        assert "recorded no attention" in driver.find_element(By.ID, "attn-note").text
        assert "--attention all" in driver.find_element(By.ID, "attn-note").text
        target = os.environ.get("SST_INTERP_SCREENSHOT")
        # move the hover off the transcript so the screenshot shows the position view whole
        _hover(driver, "#qtitle")
        driver.save_screenshot(str(tmp_path / "explore.png"))
        if target:
            shutil.copyfile(tmp_path / "explore.png", target)
        # the URL of a view opens that view: a bookmark of a sketch position (beyond the full window)
        driver.get(f"{url}?q={qid}&depth=4&turn=0&pos=8")
        _wait(driver, lambda d: "sketch states" in d.find_element(By.ID, "pos-title").text)
        cells = driver.find_elements(By.CSS_SELECTOR, "#ov-table td[data-value]")
        shown_overlap = np.array([float(c.get_attribute("data-value")) for c in cells]).reshape(3, run.num_layers)
        assert shown_overlap == pytest.approx(np.stack([truth.overlap(i, i + 1)[qi, 8] for i in (1, 2, 3)]),
                                              abs=1e-6)


@pytest.fixture(scope="module")
def tiny_recorded(tmp_path_factory):
    """A run recorded by ``record`` with a tiny random Gemma 3 and its character tokenizer (depths 1, 2)."""
    import torch

    from sst_interp.cli.record import main as record_main

    root = tmp_path_factory.mktemp("tiny")
    model = save_tiny_model(root / "model")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        record_main([*FAST, "--model", str(model), "--out", str(root / "run"), "--depths", "1,2", "--limit", "2",
                     "--batch-size", "2", "--demo-preset"])
    finally:
        torch.set_num_threads(before)
    return root / "run", model


def test_a_recorded_run_shows_its_tokenizer_pieces(tiny_recorded):
    from tokenizers import Tokenizer

    run_dir, model = tiny_recorded
    run = Run.open(run_dir)
    tok = Tokenizer.from_file(str(Path(model) / "tokenizer.json"))
    qid = run.question_ids()[0]
    ids = list(run.generations().set_index(["question_id", "depth"]).loc[(qid, 2), "token_ids"])
    with served(ExploreConfig(run=run_dir, fit_gmm=False)) as url, browser() as driver:
        driver.get(f"{url}?q={qid}")
        _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, '.tok[data-depth="2"]'))
        spans = driver.find_elements(By.CSS_SELECTOR, '.tok[data-depth="2"]')
        pieces = [s.get_attribute("textContent") for s in spans]
        assert pieces == [tok.id_to_token(i) for i in ids]
        _hover(driver, '.tok[data-depth="2"][data-pos="0"]')
        _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, '#tip-table[data-pos="0"] tr[data-iteration]'))
        block = next(run.logits(2, [qid]))
        rows = driver.find_elements(By.CSS_SELECTOR, "#tip-table tr[data-iteration]")
        assert len(rows) == 2
        for i, row in enumerate(rows):
            tops = row.find_elements(By.CSS_SELECTOR, "span.top")
            assert [int(t.get_attribute("data-id")) for t in tops] == block.top_ids[0, i, :6].tolist()


@pytest.fixture(scope="module")
def organism_run(tmp_path_factory):
    from sst_interp.cli.record import main as record_main

    out = tmp_path_factory.mktemp("organism") / "run"
    assert record_main(["--model", "hops-organism", "--questions", "hops", "--source-option", "n=24", "--depths",
                        "1,2,3,4", "--device", "cpu", "--attention", "all", "--out", str(out)]) == 0
    return out


def test_the_organism_resolves_a_hop_per_iteration_in_the_browser(organism_run, tmp_path):
    """A 6-hop question whose answer the organism only reaches after several H-cycles: hovering the answer shows
    the lens' top token per iteration, wrong first and the answer from the iteration the question resolves at.
    ``SST_INTERP_ORGANISM_SCREENSHOT=docs/img/explore-organism.png`` writes the screenshot docs/organism.md shows."""
    from sst_interp.analyses.hops import lens_by_hop

    run = Run.open(organism_run)
    lens = lens_by_hop(run, 4)
    late = lens[(lens["hops"] == 6)].pivot_table(index="question_id", columns="iteration", values="top_is_answer")
    resolving = late[(late[1] == 0) & (late[4] == 1)]
    assert len(resolving), "no 6-hop question resolves after the first H-cycle"
    qid = resolving.index[0]
    expected = lens[lens["question_id"] == qid].sort_values("iteration")["top_token"].tolist()
    with served(ExploreConfig(run=organism_run)) as url, browser() as driver:
        driver.get(f"{url}?q={qid}")
        _wait(driver, lambda d: d.find_element(By.ID, "qtitle").text.startswith(qid))
        _hover(driver, '.tok[data-depth="4"][data-pos="0"]')
        _wait(driver, lambda d: d.find_element(By.ID, "tip").is_displayed()
              and d.find_elements(By.CSS_SELECTOR, '#tip-table[data-pos="0"] tr[data-iteration]'))
        cells = driver.find_elements(By.CSS_SELECTOR, "#tip-table tr[data-iteration] td.argmax")
        shown = [cell.get_attribute("textContent").strip() for cell in cells]
        assert shown == expected  # the page's per-iteration top token is the lens' (wrong first, then the answer)
        banner = driver.find_element(By.ID, "model-banner")
        assert banner.get_attribute("data-kind") == "family" and "untrained" not in banner.text
        driver.save_screenshot(str(tmp_path / "organism.png"))
        target = os.environ.get("SST_INTERP_ORGANISM_SCREENSHOT")
        if target:
            shutil.copyfile(tmp_path / "organism.png", target)


def _attention_at(driver, iteration: int) -> bool:
    box = driver.find_element(By.ID, "attention-box")
    return box.get_attribute("data-iteration") == str(iteration) and bool(
        driver.find_elements(By.CSS_SELECTOR, "#attn-table tr.attn-row"))


def _heaviest(driver, layer: int, head: int) -> tuple[int, str]:
    """The (key index, key token) the panel names first for ``(layer, head)``."""
    first = driver.find_element(By.CSS_SELECTOR, f'#attn-table tr.attn-row[data-layer="{layer}"][data-head="{head}"] '
                                                 "td.heaviest .hk")
    key = int(first.get_attribute("data-key"))
    header = driver.find_element(By.CSS_SELECTOR, f'#attn-table th.key[data-key="{key}"]')
    return key, header.get_attribute("textContent")


def test_the_attention_panel_shows_the_organism_reading_its_chain_hop_by_hop(organism_run, tmp_path):
    """At the answer column the organism's L block head 0 reads hop 1's binding (``chain[0]=chain[1]``) at
    iteration 1 and hop 2's at iteration 2 (``organism validate``'s attention row): the panel names that key first,
    with the weights ``Run.attention`` holds. ``SST_INTERP_ATTENTION_SCREENSHOT=docs/img/explore-attention.png``
    writes the panel's screenshot."""
    from selenium.webdriver.support.ui import Select

    run = Run.open(organism_run)
    questions = run.questions()
    metadata = [json.loads(m) for m in questions["metadata"]]
    qi = next(i for i, m in enumerate(metadata) if m["hops"] >= 4)
    qid, chain = questions["question_id"].iloc[qi], metadata[qi]["chain"]
    block = next(i for i, name in enumerate(run.manifest["loop"]["layers"]) if "L_module" in name)
    stored = run.attention(4, [qid], turn=0, positions=[0])
    with served(ExploreConfig(run=organism_run, fit_gmm=False)) as url, browser(1600, 1400, scale=2) as driver:
        driver.get(f"{url}?q={qid}")
        _wait(driver, lambda d: d.find_element(By.ID, "qtitle").text.startswith(qid))
        driver.find_element(By.CSS_SELECTOR, '.tok[data-depth="4"][data-pos="0"]').click()  # the answer
        _wait(driver, lambda d: _attention_at(d, 1))
        Select(driver.find_element(By.ID, "attn-iteration")).select_by_value("1")
        _wait(driver, lambda d: _attention_at(d, 1))
        assert driver.find_element(By.ID, "attn-title").text == "attention at iteration 1"
        assert _heaviest(driver, block, 0)[1] == f"{chain[0]}={chain[1]}"  # hop 1's binding
        # the strip's weights are the stored ones, every key of the prompt
        cells = driver.find_elements(By.CSS_SELECTOR, f'#attn-table tr.attn-row[data-layer="{block}"][data-head="0"] '
                                                      "td.w")
        want = stored[(stored["iteration"] == 1) & (stored["layer"] == block) & (stored["head"] == 0)]
        assert [int(c.get_attribute("data-key")) for c in cells] == want["key_position"].tolist()
        assert [float(c.get_attribute("data-weight")) for c in cells] == \
            pytest.approx(want["weight"].tolist(), abs=1e-7)
        # step to iteration 2: the same head reads hop 2's binding
        driver.find_element(By.ID, "attn-next").click()
        _wait(driver, lambda d: _attention_at(d, 2))
        assert parse_qs(urlparse(driver.current_url).query)["it"] == ["2"]
        assert _heaviest(driver, block, 0)[1] == f"{chain[1]}={chain[2]}"
        assert len(driver.find_elements(By.CSS_SELECTOR, "#attn-table tr.attn-row")) == \
            len(stored.groupby(["layer", "head"]))
        panel = driver.find_element(By.ID, "attention-box")
        driver.execute_script("arguments[0].scrollIntoView()", panel)
        panel.screenshot(str(tmp_path / "attention.png"))
        target = os.environ.get("SST_INTERP_ATTENTION_SCREENSHOT")
        if target:
            shutil.copyfile(tmp_path / "attention.png", target)


@pytest.fixture(scope="module")
def organism_dictionary(organism_run, tmp_path_factory):
    """A shared TopK dictionary on the organism run's L block (layer 0) at depth 4, every iteration."""
    pytest.importorskip("sae_lens")
    import torch

    from sst_interp.features.options import TrainOptions
    from sst_interp.features.train import train_dictionaries

    out = tmp_path_factory.mktemp("organism-dictionary") / "shared"
    torch.set_num_threads(1)
    train_dictionaries(TrainOptions(run=organism_run, layer=0, layout="shared", width=256, k=8, steps=200,
                                    batch_size=128, lr=0.003, device="cpu", out=out))
    return out


def _features_at(driver, iteration: int) -> bool:
    box = driver.find_element(By.ID, "features-box")
    return box.get_attribute("data-iteration") == str(iteration) and bool(
        driver.find_elements(By.CSS_SELECTOR, "#feat-table tr.feat-row"))


def test_the_features_panel_follows_the_top_features_through_the_loop(organism_run, organism_dictionary, tmp_path):
    """Started with --dictionary, the answer column's panel lists the top features at the chosen iteration with
    the activation at every iteration that encode_run gives; picking another iteration in the table moves both the
    features and the attention panel there. ``SST_INTERP_FEATURES_SCREENSHOT=docs/img/explore-features.png``."""
    from sst_interp.features import DictionarySet

    run = Run.open(organism_run)
    qid = "hops-test-0003"  # the question docs/explorer.md's screenshots show
    assert qid in run.question_ids(4)
    acts = DictionarySet.load(organism_dictionary).encode_run(run, question_ids=[qid])
    at = (acts.rows["position"] == 0).to_numpy()
    dense = acts.activations[np.flatnonzero(at)].toarray()[np.argsort(acts.rows["iteration"][at].to_numpy())]
    config = ExploreConfig(run=organism_run, dictionary=organism_dictionary, fit_gmm=False)
    with served(config) as url, browser(1600, 1400, scale=2) as driver:
        driver.get(f"{url}?q={qid}")
        _wait(driver, lambda d: d.find_element(By.ID, "qtitle").text.startswith(qid))
        driver.find_element(By.CSS_SELECTOR, '.tok[data-depth="4"][data-pos="0"]').click()
        _wait(driver, lambda d: _features_at(d, 1))
        for iteration in (1, 3):
            if iteration != 1:
                driver.find_element(By.CSS_SELECTOR, f'#feat-table th.it-pick[data-iteration="{iteration}"]').click()
                _wait(driver, lambda d: _features_at(d, iteration) and _attention_at(d, iteration))
                assert parse_qs(urlparse(driver.current_url).query)["it"] == [str(iteration)]
            chosen = dense[iteration - 1]
            want = sorted(np.flatnonzero(chosen), key=lambda f: (-chosen[f], f))[:8]
            rows = driver.find_elements(By.CSS_SELECTOR, "#feat-table tr.feat-row")
            assert [int(r.get_attribute("data-feature")) for r in rows] == [int(f) for f in want]
            for row in rows:
                cells = row.find_elements(By.CSS_SELECTOR, "td[data-activation]")
                f = int(row.get_attribute("data-feature"))
                assert [float(c.get_attribute("data-activation")) for c in cells] == \
                    pytest.approx(dense[:, f].tolist(), rel=1e-6)
            assert driver.find_element(By.ID, "feat-title").text == f"features at iteration {iteration}"
        panel = driver.find_element(By.ID, "features-box")
        driver.execute_script("arguments[0].scrollIntoView()", panel)
        panel.screenshot(str(tmp_path / "features.png"))
        target = os.environ.get("SST_INTERP_FEATURES_SCREENSHOT")
        if target:
            shutil.copyfile(tmp_path / "features.png", target)
