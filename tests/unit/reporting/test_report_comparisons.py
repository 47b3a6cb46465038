"""The report's comparison artefacts end to end on planted runs and training folders: the two ablation tables, the
hyperparameter table, the three loss figures and the external comparison are written; runs recorded under other
conditions and malformed CSVs are refused before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sst_interp.reporting import ReportConfig, build_report
from sst_interp.synthetic import SyntheticSpec, write_synthetic_run
from sst_interp.train.config import TrainConfig
from tests.unit.conftest import fails_with_one_error_line

SMALL = dict(num_layers=2, hidden_size=32, full_positions=1, top_k=8, vocab_size=256, extra_tokens=1,
             n_questions=10, batch_questions=10, halting_dims=(), questions="gpqa_diamond")
FLAT = {"main": [[1, 1, 1], [1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0], [1, 1, 1], [0, 1, 1], [0, 0, 0],
                 [1, 0, 1], [0, 0, 0]],
        "nobias": [[0, 0, 0], [1, 1, 1], [0, 0, 0], [0, 0, 0], [0, 1, 0], [1, 1, 1], [0, 0, 0], [0, 0, 1],
                   [0, 0, 0], [0, 0, 0]]}
SST = {"main": {"theta_init": -1.8, "update": "direct"}, "nobias": {"theta_init": 0.0, "update": "direct"},
       "ema": {"theta_init": -1.8, "update": "ema_linked"}}
#: The artefacts these inputs support (tab_external_gsm8k and tab_external_comparison need other benchmarks).
EXPECTED = ("tab_alpha_init_ablation", "tab_ema_variant_ablation", "tab_hyperparameters", "fig_sst_vs_nobias_loss",
            "fig_sst_vs_baseline_training_loss", "fig_sst_vs_baseline_validation_loss", "tab_external_gpqa")


def _training_folder(folder: Path, baseline: bool = False, **overrides) -> Path:
    folder.mkdir(parents=True)
    config = TrainConfig(train_data="train.jsonl", val_data="val.jsonl", baseline=baseline, **overrides)
    (folder / "train_config.json").write_text(json.dumps({"config": config.to_dict(), "train_sha256": "a" * 64,
                                                          "val_sha256": "b" * 64}))
    (folder / "summary.json").write_text(json.dumps({"best_step": 8, "train_examples": 100, "val_examples": 10,
                                                     "elapsed_s": 12.5, "backbone": "tiny"}))
    steps = np.arange(1, 13)
    shift = 0.0 if baseline else (0.2 if overrides.get("theta_init") == 0.0 else 0.1)
    pd.DataFrame({"step": steps, "train_loss": 2.0 / steps + shift,
                  "val_loss": [2.0 / s + shift if s % 4 == 0 else None for s in steps]}).to_csv(
        folder / "train_log.csv", index=False)
    if not baseline:
        pd.DataFrame({"step": [0], "layer": [0], "mean": [0.03], "std": [0.0], "min": [0.03], "max": [0.03]}).to_csv(
            folder / "alpha_log.csv", index=False)
    return folder


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cmp")
    out: dict[str, Path] = {}
    for seed, name in enumerate(("main", "nobias", "ema")):
        flat = np.array(FLAT.get(name, FLAT["nobias"]), bool)
        write_synthetic_run(root / "runs" / name, SyntheticSpec(**SMALL, depths=(1, 2, 3), correct=flat,
                                                                sst=SST[name], seed=seed))
        out[name] = root / "runs" / name
    base = np.array([[1], [1], [0], [0], [0], [1], [1], [0], [0], [1]], bool)
    write_synthetic_run(root / "runs" / "base", SyntheticSpec(**SMALL, depths=(1,), correct=base, seed=7))
    out["base"] = root / "runs" / "base"
    out["train_sst"] = _training_folder(root / "train" / "a")
    out["train_nobias"] = _training_folder(root / "train" / "b", theta_init=0.0)
    out["train_base"] = _training_folder(root / "train" / "c", baseline=True)
    out["root"] = root
    return out


@pytest.fixture(scope="module")
def report(inputs):
    config = ReportConfig(runs=(inputs["main"], inputs["nobias"], inputs["ema"]), baselines=(inputs["base"],),
                          training_logs=(inputs["train_base"], inputs["train_nobias"], inputs["train_sst"]),
                          external="gpqa", out=inputs["root"] / "out", progress=False,
                          only=(*EXPECTED, "tab_external_gsm8k", "tab_external_comparison"))
    return build_report(config)


def test_all_comparison_artefacts_are_written(report):
    assert set(report.names("ok")) == set(EXPECTED), {o.artefact.name: o.reason for o in report.outcomes}
    for name in EXPECTED:
        ext = ("png", "pdf") if name.startswith("fig_") else ("md", "csv", "tex")
        for e in ext:
            assert (report.out / f"{name}.{e}").stat().st_size > 0
    skipped = {o.artefact.name: o.reason for o in report.outcomes if o.status == "skipped"}
    assert "GSM8K" in skipped["tab_external_gsm8k"]


def test_ablation_csv_holds_the_planted_values(report):
    table = pd.read_csv(report.out / "tab_alpha_init_ablation.csv").set_index("condition")
    assert list(table.loc["SST (theta_init=-1.8, direct update)"]) == pytest.approx([40.0, 60.0, 70.0])
    assert list(table.loc["SST (no bias) (theta_init=0, direct update)"]) == pytest.approx([20.0, 30.0, 40.0])
    assert list(table.loc["Delta vs SST (pp)"]) == pytest.approx([-20.0, -30.0, -30.0])
    assert list(table.loc["Delta vs baseline (pp)"]) == pytest.approx([-30.0, -20.0, -10.0])
    assert table.loc["McNemar exact p vs SST", "iter=1"] == pytest.approx(0.5)
    ema = pd.read_csv(report.out / "tab_ema_variant_ablation.csv")
    assert ema["condition"][1].startswith("Linked blend EMA variant")


def test_loss_curves_are_labelled_by_config_and_the_external_table_by_kind(report):
    outcome = report.outcome("fig_sst_vs_nobias_loss")
    assert outcome.data.meta["series"] == ["SST (theta_init=-1.8, direct update)",
                                          "SST (theta_init=0, direct update)"]
    for name in ("fig_sst_vs_baseline_training_loss", "fig_sst_vs_baseline_validation_loss"):
        meta = report.outcome(name).data.meta  # the paper's panels: the SST and the baseline only
        assert meta["series"] == ["SST (theta_init=-1.8, direct update)", "baseline (LoRA only, one pass)"]
        assert meta["roles"] == ["main", "baseline"]
    md = (report.out / "tab_external_gpqa.md").read_text()
    assert "recorded" in md and "published" in md and "not recorded by this tool" in md
    hyper = pd.read_csv(report.out / "tab_hyperparameters.csv")
    assert list(hyper.columns[2:]) == ["SST (theta_init=-1.8, direct update)", "baseline (LoRA only, one pass)",
                                       "SST (theta_init=0, direct update)"]


def test_runs_of_other_depths_are_refused_before_writing(inputs, tmp_path, capsys):
    from sst_interp.cli.report import main

    other = tmp_path / "other"
    write_synthetic_run(other, SyntheticSpec(**SMALL, depths=(1, 2), correct=np.zeros((10, 2), bool),
                                             sst=SST["nobias"], seed=11))
    out = tmp_path / "out"
    fails_with_one_error_line(capsys, main, ["--run", str(inputs["main"]), "--run", str(other), "--out", str(out),
                                             "--quiet"], "differ in depths ([1, 2, 3] vs [1, 2])")
    assert not out.exists()


def test_malformed_external_csv_is_refused_before_writing(inputs, tmp_path, capsys):
    from sst_interp.cli.report import main

    bad = tmp_path / "bad.csv"
    bad.write_text("model,parameters,accuracy,prompting,source\nA,1B,n/a,0-shot,x\n")
    out = tmp_path / "out"
    fails_with_one_error_line(capsys, main, ["--run", str(inputs["main"]), "--external", str(bad), "--out",
                                             str(out), "--quiet"], "row 2 (A) has accuracy 'n/a'")
    assert not out.exists()
