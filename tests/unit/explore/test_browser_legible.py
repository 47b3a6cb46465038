"""The explorer explains what it shows (issue 31), in a real browser (headless Debian Chromium): a colour per layer
placed on a labelled colour bar, axis titles on every plot, a legend for the token marks, decoded argmax tokens,
the model banner, the verdict refreshed when the GMM fit arrives, the regime at the depth on screen, a note where
a panel needs full states, and a ``--report`` header that keeps the page inside the window.

``SST_INTERP_SCREENSHOTS=docs/img`` writes the position view, the hover, the halting view and the report header
there (``explore-position.png``, ``explore-hover.png``, ``explore-halting.png``, ``explore-report-header.png``,
``explore-layer-lens.png``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from sst_interp.explore.config import ExploreConfig
from sst_interp.explore.source import Threshold
from sst_interp.store import Run
from tests.unit.explore.browser import CHROMIUM, browser, chromedriver, served, serving
from tests.unit.explore.test_browser import tiny_recorded  # noqa: F401 - the recorded run's fixture

pytestmark = [pytest.mark.timeout(300)]
if not (os.path.exists(CHROMIUM) and chromedriver()):
    pytestmark.append(pytest.mark.skip(reason="needs /usr/bin/chromium and chromedriver (apt-get install chromium "
                                              "chromium-driver; .ci/run installs them)"))

By = pytest.importorskip("selenium.webdriver.common.by").By
PLOTS = ("ov-heat", "regime-plot", "l2-plot", "tracked-plot")


def _wait(driver, condition, seconds: float = 30):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, seconds).until(lambda d: condition(d))


def _hover(driver, selector: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).move_to_element(driver.find_element(By.CSS_SELECTOR, selector)).perform()


def _screenshot(driver, tmp_path: Path, name: str) -> None:
    driver.save_screenshot(str(tmp_path / name))
    folder = os.environ.get("SST_INTERP_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_path / name, Path(folder) / name)


def _position_ready(driver, depth: int, pos: int) -> bool:
    title = driver.find_element(By.ID, "pos-title").text
    return title.startswith(f"position {pos} ") and f"depth {depth}" in title and \
        driver.find_element(By.ID, "regime-status").text in ("low-overlap", "stable")


def test_the_position_view_explains_what_it_shows(planted, tmp_path):
    root, truth = planted
    run = Run.open(root / "sst")
    qid = truth.question_ids[1]
    with served(ExploreConfig(run=root / "sst", fit_gmm=False)) as url, browser(1600, 1500) as driver:
        driver.get(f"{url}?q={qid}&depth=4&turn=0&pos=0")
        _wait(driver, lambda d: _position_ready(d, 4, 0))
        # one line per layer, each its own colour, on a sequential scale whose colour bar is titled "layer"
        lines = driver.execute_script("return document.getElementById('l2-plot').data"
                                      ".filter(t => t.meta && t.meta.layer !== undefined)"
                                      ".map(t => [t.meta.layer, t.line.color])")
        assert [layer for layer, _ in lines] == list(range(run.num_layers))
        assert len({colour for _, colour in lines}) == run.num_layers
        bar = driver.execute_script("return document.getElementById('l2-plot').data"
                                    ".filter(t => t.marker && t.marker.showscale)[0].marker")
        assert bar["colorbar"]["title"]["text"] == "layer" and bar["colorscale"] == "Viridis"
        # axis titles on every plot, and a titled colour bar on the heatmap
        for plot in PLOTS:
            titles = driver.execute_script(f"const l = document.getElementById('{plot}').layout; "
                                           "return [l.xaxis.title.text, l.yaxis.title.text]")
            assert all(titles), (plot, titles)
        assert driver.execute_script("return document.getElementById('ov-heat').data[0].colorbar.title.text") == \
            f"top-{_k(driver)} overlap"
        # the legend strip names the token marks; the banner says what the run was made with
        legend = driver.find_element(By.ID, "token-legend").text
        assert "argmax changed across the iterations" in legend and "first divergence" in legend
        banner = driver.find_element(By.ID, "model-banner")
        assert banner.get_attribute("data-kind") == "synthetic" and "no model was run" in banner.text
        _hover(driver, "#qtitle")
        _screenshot(driver, tmp_path, "explore-position.png")
        # hover a token: the tip's argmax column shows pieces with their ids (no tokenizer here: ⟨id⟩)
        _hover(driver, '.tok[data-depth="3"][data-pos="1"]')
        _wait(driver, lambda d: d.find_element(By.ID, "tip").is_displayed()
              and d.find_elements(By.CSS_SELECTOR, '#tip-table[data-pos="1"] td.argmax'))
        for cell in driver.find_elements(By.CSS_SELECTOR, "#tip-table td.argmax"):
            assert cell.text == f"\u27e8{cell.get_attribute('data-id')}\u27e9"
        _screenshot(driver, tmp_path, "explore-hover.png")
        # the regime panel follows the depth on screen
        driver.get(f"{url}?q={qid}&depth=2&turn=0&pos=0")
        _wait(driver, lambda d: _position_ready(d, 2, 0))
        assert "depth 1 iteration 1 vs depth 2 iteration 2" in driver.find_element(By.ID, "regime-threshold").text
        # past the full-state window the L2 panel says why it is empty
        driver.get(f"{url}?q={qid}&depth=4&turn=0&pos=8")
        _wait(driver, lambda d: _position_ready(d, 4, 8))
        note = driver.find_element(By.ID, "l2-note")
        assert note.is_displayed() and "past the full-state window (positions 0-5)" in note.text


def _k(driver) -> int:
    return int(driver.find_element(By.ID, "pos-title").text.split("top-")[1])


def test_the_verdict_is_refreshed_when_the_fit_arrives(planted):
    root, truth = planted
    qid = truth.question_ids[1]
    with serving(ExploreConfig(run=root / "sst", fit_gmm=False)) as (url, explorer), browser() as driver:
        driver.get(f"{url}?q={qid}&depth=4&turn=0&pos=0")
        _wait(driver, lambda d: _position_ready(d, 4, 0))
        before = driver.find_element(By.ID, "regime-status").text
        assert "still computing" in driver.find_element(By.ID, "regime-threshold").text
        lowest = min(driver.execute_script("return document.getElementById('regime-plot').data[0].y"))
        driver.execute_script("window.sameDocument = true")
        # the fit arrives with a threshold on the other side of this position's lowest layer
        value = lowest - 0.01 if before == "low-overlap" else lowest + 0.01
        explorer.source._threshold = Threshold(value, "this run's GMM crossover", True)
        after = "stable" if before == "low-overlap" else "low-overlap"
        _wait(driver, lambda d: d.find_element(By.ID, "regime-status").text == after)
        assert f"vs threshold {value:.4f} (this run's GMM crossover)" in \
            driver.find_element(By.ID, "regime-threshold").text
        assert f"threshold {value:.4f} (this run's GMM crossover)" in driver.find_element(By.ID, "run-info").text
        assert driver.execute_script("return window.sameDocument === true")  # no reload, no navigation


def test_a_recorded_run_shows_decoded_argmax_and_its_untrained_model(tiny_recorded):  # noqa: F811
    from tokenizers import Tokenizer

    run_dir, model = tiny_recorded
    run = Run.open(run_dir)
    tok = Tokenizer.from_file(str(Path(model) / "tokenizer.json"))
    qid = run.question_ids()[0]
    block = next(run.logits(2, [qid]))
    with served(ExploreConfig(run=run_dir, fit_gmm=False)) as url, browser() as driver:
        driver.get(f"{url}?q={qid}&depth=2&turn=0&pos=0")
        _wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#lens td.argmax")) == 2)
        cells = driver.find_elements(By.CSS_SELECTOR, "#lens td.argmax")
        for i, cell in enumerate(cells):
            token_id = int(block.argmax[0, i])
            assert int(cell.get_attribute("data-id")) == token_id
            piece = tok.id_to_token(token_id).replace("\u2581", " ")
            assert cell.text == piece.replace(" ", "\u2423").replace("\n", "\u23ce") != str(token_id)
        banner = driver.find_element(By.ID, "model-banner")
        assert banner.get_attribute("data-kind") == "untrained"
        assert "untrained SST (the demo preset, state_scale=hidden)" in banner.text


def test_the_report_header_keeps_the_page_inside_the_window(planted, tmp_path):
    root, _ = planted
    report = tmp_path / "report"
    report.mkdir()
    (report / "index.html").write_text("<html><body>report</body></html>")
    for i in range(40):
        (report / f"tab_measurement_with_a_long_name_{i:02d}.csv").write_text("a\n1\n")
    with served(ExploreConfig(run=root / "sst", report=report, fit_gmm=False)) as url, \
            browser(1600, 1100) as driver:
        driver.get(url)
        _wait(driver, lambda d: d.find_element(By.ID, "report-count").text == "report (41 files)")
        fits = "return document.documentElement.scrollWidth <= window.innerWidth"
        assert driver.execute_script(fits)
        assert driver.find_element(By.ID, "run-info").size["width"] >= 400
        driver.find_element(By.ID, "report-count").click()
        _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#report-links a")[-1].is_displayed())
        assert len(driver.find_elements(By.CSS_SELECTOR, "#report-links a")) == 41
        assert driver.execute_script(fits)
        assert driver.find_element(By.ID, "run-info").size["width"] >= 400
        _screenshot(driver, tmp_path, "explore-report-header.png")


def test_the_halting_view_draws_one_line_per_distinct_trajectory(planted, tmp_path):
    from sst_interp.cli.probe import main as probe_main

    root, truth = planted
    probe_main(["train", "--run", str(root / "sst"), "--out", str(tmp_path / "probe")])
    qid = truth.question_ids[1]
    with served(ExploreConfig(run=root / "sst", probe=tmp_path / "probe", fit_gmm=False)) as url, \
            browser() as driver:
        driver.get(f"{url}?q={qid}")
        _wait(driver, lambda d: d.find_element(By.ID, "halting").is_displayed()
              and d.execute_script("return (document.getElementById('halting-plot').data || []).length") > 0)
        names = driver.execute_script("return document.getElementById('halting-plot').data.map(t => t.name)")
        # the planted position-0 states do not depend on the depth: depths 1-4 share one trajectory
        assert names == ["d1,2,3,4 turn 0", "threshold"]
        layout = driver.execute_script("const l = document.getElementById('halting-plot').layout; "
                                       "return [l.xaxis.title.text, l.yaxis.title.text]")
        assert layout == ["iteration", "probe logit"]
        driver.execute_script("document.getElementById('halting').scrollIntoView()")
        _screenshot(driver, tmp_path, "explore-halting.png")


def test_the_per_layer_lens_loads_the_model_on_demand(tiny_recorded, planted, tmp_path):  # noqa: F811
    from tokenizers import Tokenizer

    run_dir, model = tiny_recorded
    run = Run.open(run_dir)
    tok = Tokenizer.from_file(str(Path(model) / "tokenizer.json"))
    qid = run.question_ids()[0]
    block = next(run.logits(2, [qid]))
    with serving(ExploreConfig(run=run_dir, fit_gmm=False)) as (url, explorer), browser(1600, 1500) as driver:
        driver.get(f"{url}?q={qid}&depth=2&turn=0&pos=0")
        _wait(driver, lambda d: _position_ready(d, 2, 0))
        assert not explorer.lens.loaded  # nothing loaded until the view is opened
        driver.find_element(By.CSS_SELECTOR, "#layer-lens-box summary").click()
        _wait(driver, lambda d: d.execute_script(
            "return (document.getElementById('layer-lens-plot').data || []).length") == 1)
        trace = driver.execute_script("const t = document.getElementById('layer-lens-plot').data[0]; "
                                      "return [t.customdata, t.text, t.y]")
        ids, texts, rows = trace
        assert rows == ["iter 1", "iter 2"] and len(ids[0]) == run.num_layers
        for i in range(2):  # the last layer's top token is the recorded argmax of the iteration, decoded
            assert ids[i][-1] == block.argmax[0, i]
            piece = tok.id_to_token(int(block.argmax[0, i])).replace("\u2581", " ")
            assert texts[i][-1] == piece.replace(" ", "\u2423").replace("\n", "\u23ce")
        assert "final norm and unembedding" in driver.find_element(By.ID, "layer-lens-info").text
        driver.execute_script("document.getElementById('layer-lens-box').scrollIntoView()")
        _screenshot(driver, tmp_path, "explore-layer-lens.png")
    root, truth = planted
    with served(ExploreConfig(run=root / "sst", fit_gmm=False)) as url, browser() as driver:
        driver.get(f"{url}?q={truth.question_ids[0]}&depth=4&turn=0&pos=0")
        _wait(driver, lambda d: _position_ready(d, 4, 0))
        driver.find_element(By.CSS_SELECTOR, "#layer-lens-box summary").click()
        _wait(driver, lambda d: "the run names no model" in d.find_element(By.ID, "layer-lens-info").text)
