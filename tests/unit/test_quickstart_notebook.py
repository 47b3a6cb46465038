"""examples/quickstart.ipynb executed headless with a real kernel against a small recorded run, and the run's
shards read directly with DuckDB (the format is open)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import duckdb
import nbformat
import numpy as np
import pandas as pd
import pytest
import torch

from sst_interp import analyses, study
from sst_interp.cli.record import main as record_main
from sst_interp.model.testing import char_tokenizer, tiny_gemma3
from sst_interp.store import Run
from tests.unit.notebooks import executed_code_cells, output_text

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "quickstart.ipynb"


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("notebook")
    model = root / "model"
    tiny_gemma3(dtype=torch.float32).save_pretrained(model)
    char_tokenizer().save_pretrained(model)
    out = root / "run"
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        record_main(["--questions", "demo", "--model", str(model), "--demo-preset", "--depths", "1,2,3",
                     "--limit", "6", "--batch-size", "3", "--max-new-tokens", "5", "--full-positions", "3",
                     "--sketch-positions", "2", "--top-k", "6", "--device", "cpu", "--out", str(out)])
    finally:
        torch.set_num_threads(before)
    return out


def test_quickstart_notebook_runs_and_shows_the_runs_tables(small_run, tmp_path, monkeypatch):
    figure = tmp_path / "accuracy.png"
    # the kernel inherits the environment; monkeypatch restores it afterwards
    monkeypatch.setenv("SST_INTERP_RUN", str(small_run))
    monkeypatch.setenv("SST_INTERP_FIGURE", str(figure))
    code = executed_code_cells(NOTEBOOK, tmp_path, timeout=300)
    a = study.open(small_run)
    staged = a.staged_breakdown()
    staged_text = output_text(code[2])
    for column in staged.columns:
        assert str(column) in staged_text
    assert str(int(staged["n_questions"].iloc[0])) in staged_text
    basins_text = output_text(code[3])
    for column in a.basin_summary().columns[:3]:
        assert str(column) in basins_text
    assert f"GMM threshold: {a.gmm_threshold:.4f}" in output_text(code[4])
    assert "baseline" in output_text(code[5])  # main_results says it needs a baseline
    assert figure.is_file() and figure.stat().st_size > 1000
    # figures are drawn inline: the staged-capacity plot is an image in the notebook itself
    assert any("image/png" in output.get("data", {}) for output in code[2].get("outputs", []))
    assert "fig:layer_profile" in output_text(code[8])  # the registry listing
    duck = output_text(code[7])
    run = Run.open(small_run)
    for depth in run.depths:
        rows = sum(len(block.positions) * depth for block in run.logits(depth))
        assert f"{rows}" in duck


def test_duckdb_reads_the_shards_as_the_reader_does(small_run):
    run = Run.open(small_run)
    depth = 2
    block = next(iter(run.hidden(depth)))
    frame = duckdb.sql(f"""
        SELECT position, iteration, layer, "values" FROM read_parquet('{small_run}/hidden/*/*.parquet',
               hive_partitioning = true)
        WHERE depth = {depth} AND question_id = '{block.question_id}' AND turn = {block.turn}
        ORDER BY position, iteration, layer""").df()
    values = np.stack(frame["values"].to_numpy()).astype(np.float32)
    p, i, l, d = block.values.shape
    assert len(frame) == p * i * l
    np.testing.assert_array_equal(values.reshape(p, i, l, d), block.values)
    manifest = json.loads((small_run / "manifest.json").read_text())
    counted = duckdb.sql(f"""SELECT depth, count(DISTINCT question_id) AS n FROM
        read_parquet('{small_run}/logits/*/*.parquet', hive_partitioning = true) GROUP BY depth""").fetchall()
    assert {int(d): n for d, n in counted} == {int(d): len(ids) for d, ids in manifest["status"].items()}


def test_analyses_open_accepts_paths_and_runs_and_says_what_is_missing(small_run):
    by_path, by_run = study.open(small_run), study.open(Run.open(small_run))
    assert by_path.staged_breakdown().equals(by_run.staged_breakdown())
    support = by_path.available().set_index("measurement")
    assert not support.loc["main_results", "available"]
    assert "baseline" in support.loc["main_results", "reason"]
    with pytest.raises(analyses.NotAvailable, match="baseline"):
        by_path.main_results()
    # the shared steps are computed once
    assert by_path.regime_labels() is by_path.regime_labels()


def test_the_shard_cell_works_without_duckdb(small_run, monkeypatch):
    """On a plain install (no ``notebook`` extra) the DuckDB cell falls back to pyarrow and shows the same table."""
    cell = next(c for c in nbformat.read(NOTEBOOK, as_version=4).cells if "read_parquet" in c.source)
    with_duckdb: dict = {"RUN": str(small_run)}
    exec(cell.source, with_duckdb)  # noqa: S102 - the notebook's own cell
    monkeypatch.setitem(sys.modules, "duckdb", None)  # import duckdb now raises ImportError
    without: dict = {"RUN": str(small_run)}
    exec(cell.source, without)  # noqa: S102
    assert without["duckdb"] is None and with_duckdb["duckdb"] is not None
    expected = with_duckdb["per_depth"].astype({"depth": "int64", "rows": "int64", "questions": "int64"})
    got = without["per_depth"].astype({"depth": "int64", "rows": "int64", "questions": "int64"})
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)
