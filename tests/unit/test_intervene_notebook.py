"""examples/intervene_window.ipynb (experiment a in a notebook) executed headless with a real kernel on a tiny
model: its table is the experiment's window table with the median's interval, and the window run reads as an
ordinary run."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tests.unit.conftest import save_tiny_model
from tests.unit.notebooks import executed_code_cells, output_text

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "intervene_window.ipynb"


def test_the_window_notebook_runs_experiment_a(tmp_path, monkeypatch):
    model = save_tiny_model(tmp_path / "model")
    out, figure = tmp_path / "exp", tmp_path / "window.png"
    # the kernel inherits the environment; monkeypatch restores it afterwards
    for key, value in (("SST_INTERP_MODEL", model), ("SST_INTERP_OUT", out), ("SST_INTERP_FIGURE", figure),
                       ("OMP_NUM_THREADS", "1")):
        monkeypatch.setenv(key, str(value))
    code = executed_code_cells(NOTEBOOK, tmp_path)
    assert "3 layers, 6 questions" in output_text(code[0])
    table = pd.read_parquet(out / "window.parquet")
    # 6 questions: the fewest the median's sign-test interval is given from (it is [min, max] there)
    assert table[["logprob_change_median_ci_low", "logprob_change_median_ci_high"]].notna().all(axis=None)
    windows = ["window-0-0", "window-1-1", "window-2-2"]
    assert list(table["condition"]) == ["clean depth 1", "clean depth 2", *windows, *[f"{w}-mean" for w in windows],
                                        *[f"{w}-resample" for w in windows]]
    assert list(table["mode"]) == ["clean"] * 2 + ["freeze"] * 3 + ["mean"] * 3 + ["resample"] * 3
    for condition in table["condition"]:
        assert condition in output_text(code[1])
    assert "mcnemar_exact_p" in output_text(code[2])  # intervention_effect of the first window against the clean run
    assert figure.is_file() and figure.stat().st_size > 1000
