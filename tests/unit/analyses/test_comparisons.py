"""tab:hyperparameters equals the saved training configs; the external comparison sorts the published rows and marks
the run's; malformed CSVs and duplicate training roles are refused with one line naming the problem."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sst_interp.analyses import ablation, external
from sst_interp.analyses.comparisons import training_role, training_roles
from sst_interp.kernels.errors import UsageError
from sst_interp.store import Run
from sst_interp.study import ComparisonAnalysis
from sst_interp.synthetic import SyntheticSpec, write_synthetic_run

REPO = Path(__file__).resolve().parents[3]
SST_FOLDER = REPO / "sst_interp/checkpoints/demo_codeact"
BASE_FOLDER = REPO / "sst_interp/checkpoints/demo_codeact_baseline"


def _config(folder: Path) -> dict:
    return json.loads((folder / "train_config.json").read_text())["config"]


def test_training_roles_come_from_the_saved_configs():
    assert training_role(SST_FOLDER) == ("main", "SST (theta_init=-1.8, direct update)")
    assert training_role(BASE_FOLDER)[0] == "baseline"
    with pytest.raises(UsageError, match="two main training logs given"):
        training_roles([SST_FOLDER, SST_FOLDER])


def test_hyperparameter_table_equals_the_saved_configs():
    c = ComparisonAnalysis(training=[BASE_FOLDER, SST_FOLDER])  # order given does not decide the columns
    table = c.table("tab:hyperparameters").set_index("hyperparameter")
    sst_col, base_col = "SST (theta_init=-1.8, direct update)", "baseline (LoRA only, one pass)"
    assert list(table.columns) == ["group", sst_col, base_col]
    for folder, col in ((SST_FOLDER, sst_col), (BASE_FOLDER, base_col)):
        cfg = _config(folder)
        summary = json.loads((folder / "summary.json").read_text())
        assert table.loc["Rank r", col] == str(cfg["lora_r"])
        assert table.loc["Scaling alpha", col] == f"{cfg['lora_alpha']:g}"
        assert table.loc["Dropout", col] == f"{cfg['lora_dropout']:g}"
        assert table.loc["Target modules", col] == ", ".join(cfg["lora_targets"])
        assert table.loc["Weight decay", col] == f"{cfg['weight_decay']:g}"
        assert table.loc["Gradient clip (norm)", col] == f"{cfg['max_grad_norm']:g}"
        assert table.loc["Adam beta1, beta2, epsilon", col] == (f"{cfg['adam_beta1']:g}, {cfg['adam_beta2']:g}, "
                                                                 f"{cfg['adam_eps']:g}")
        assert table.loc["LR (LoRA group)", col].startswith(f"{cfg['lr_lora']:g}, {cfg['warmup_steps']}-step")
        assert table.loc["Micro-batch size", col] == str(cfg["micro_batch_size"])
        assert table.loc["Gradient accumulation", col] == str(cfg["grad_accum"])
        assert table.loc["Effective batch size", col] == str(cfg["micro_batch_size"] * cfg["grad_accum"])
        assert table.loc["Max steps", col] == str(cfg["max_steps"])
        assert table.loc["Best checkpoint step", col] == str(summary["best_step"])
        assert table.loc["Training examples", col] == str(summary["train_examples"])
        assert table.loc["Validation examples", col] == str(summary["val_examples"])
    sst_cfg = _config(SST_FOLDER)
    assert table.loc["LR (SST group)", sst_col] == f"{sst_cfg['lr_sst']:g}, constant"
    assert table.loc["LR (SST group)", base_col] == "n/a (SST only)"
    assert table.loc["Update mode", sst_col] == sst_cfg["update"]
    meta = json.loads((SST_FOLDER / "sst_config.json").read_text())
    # blend logits and state-norm weights: one vector of d per layer each
    assert table.loc["Total parameter count", sst_col] == f"{2 * meta['num_layers'] * meta['hidden_size']:,}"
    assert table.loc["Forward passes per step", sst_col] == "2"
    assert table.loc["Forward passes per step", base_col] == "1"


def test_a_field_that_differs_outside_the_architecture_is_flagged(tmp_path):
    base = tmp_path / "base"
    shutil.copytree(BASE_FOLDER, base, ignore=shutil.ignore_patterns("adapter"))
    meta = json.loads((base / "train_config.json").read_text())
    same = ComparisonAnalysis(training=[SST_FOLDER, base]).notes("tab:hyperparameters")
    meta["config"]["lora_dropout"] = 0.1
    (base / "train_config.json").write_text(json.dumps(meta))
    notes = ComparisonAnalysis(training=[SST_FOLDER, base]).notes("tab:hyperparameters")
    flagged = [n for n in notes if n.startswith("DIFFERS")]
    unflagged = [n for n in same if n.startswith("DIFFERS")]
    assert len(flagged) == len(unflagged) + 1
    assert any("lora_dropout is 0.05" in n and "0.1" in n for n in flagged)


@pytest.fixture(scope="module")
def gpqa_run(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ext") / "run"
    correct = np.zeros((10, 2), bool)
    correct[:4, 0] = True
    correct[4:6, 1] = True  # staged capacity 6 of 10 = 60%
    write_synthetic_run(path, SyntheticSpec(n_questions=10, depths=(1, 2), num_layers=2, hidden_size=32,
                                            full_positions=1, top_k=8, vocab_size=256, extra_tokens=1,
                                            batch_questions=10, halting_dims=(), correct=correct,
                                            questions="gpqa_diamond",
                                            sst={"theta_init": -1.8, "update": "direct"}))
    return path


def test_external_table_sorts_and_marks_the_run(gpqa_run):
    c = ComparisonAnalysis([gpqa_run], external="gpqa")
    table = c.table("tab:external_gpqa")
    published = pd.read_csv(external.shipped_path("gpqa"))
    assert len(table) == len(published) + 1
    assert list(table["accuracy_pct"]) == sorted(table["accuracy_pct"])
    recorded = table.index[table["kind"] == "recorded"].tolist()
    assert len(recorded) == 1
    # 60% sorts after DeepSeek V3 (59.1) and before Gemini 2.0 Flash (60.1)
    assert table.loc[recorded[0] - 1, "model"] == "DeepSeek V3"
    assert table.loc[recorded[0] + 1, "model"] == "Gemini 2.0 Flash"
    assert table.loc[recorded[0], "accuracy_pct"] == pytest.approx(60.0)
    assert set(table["kind"]) == {"published", "recorded"}
    assert any("not recorded by this tool" in n for n in c.notes("tab:external_gpqa"))
    assert "needs a run on GSM8K that is not an ablation variant" in c.attempt("tab:external_gsm8k").reason


def test_without_external_the_tables_are_skipped_with_the_reason(gpqa_run):
    available = ComparisonAnalysis([gpqa_run]).available().set_index("label")
    assert not available.loc["tab:external_gpqa", "available"]
    assert "needs --external" in available.loc["tab:external_gpqa", "reason"]


@pytest.mark.parametrize("text, phrase", [
    ("model,parameters,accuracy,source\nA,1B,50,x\n", "header lacks columns ['prompting']"),
    ("model,parameters,accuracy,prompting,source\nA,1B,50,0-shot,x\nB,2B,abc,0-shot,y\n",
     "row 3 (B) has accuracy 'abc'"),
    ("model,parameters,accuracy,prompting,source\nA,1B,150,0-shot,x\n", "row 2 (A) has accuracy '150'"),
])
def test_malformed_csv_is_refused_naming_the_row(tmp_path, text, phrase):
    path = tmp_path / "ext.csv"
    path.write_text(text)
    with pytest.raises(UsageError, match=phrase.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        external.read_external(path)


def test_percent_signs_are_accepted(tmp_path):
    path = tmp_path / "ext.csv"
    path.write_text("model,parameters,accuracy,prompting,source\nA,1B,50.5%,0-shot,x\n")
    assert external.read_external(path)["accuracy"].tolist() == [50.5]


# ------------------------------------------------------------------------------------------------ run kinds (issue 44)
def _as_recorded(tmp_path: Path, name: str, identity: dict, sst: dict | None, **extra) -> Path:
    """A synthetic GPQA run whose manifest is rewritten as ``record`` writes one for a real model: ``identity``
    (model, checkpoint) and the ``sst`` block (None: removed, as in a manifest too old to carry one)."""
    path = tmp_path / name
    write_synthetic_run(path, SyntheticSpec(n_questions=10, depths=(1, 2), num_layers=2, hidden_size=32,
                                            full_positions=1, top_k=8, vocab_size=256, extra_tokens=1,
                                            batch_questions=10, halting_dims=(), questions="gpqa_diamond",
                                            sst={"theta_init": -1.8, "update": "direct"}))
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["identity"].update(identity)
    if sst is None:
        del manifest["sst"]
    else:
        manifest["sst"] = sst
    manifest.update(extra)
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


PAPER_SST = {"a_min": 0.015, "a_max": 0.1, "theta_init": -1.8, "update": "direct", "state_scale": "unit",
             "layers": None, "state_norm_eps": 1e-6}
GEMMA = "google/gemma-3-270m"


def _recorded_label(path: Path) -> str:
    table = ComparisonAnalysis([path], external="gpqa").table("tab:external_gpqa")
    (label,) = table.loc[table["kind"] == "recorded", "model"]
    return label


def test_a_baseline_recording_is_labelled_a_baseline_not_the_main_sst(tmp_path):
    # issue 44: a baseline recording keeps theta_init=-1.8 with layers: [] and was printed as "SST (theta_init=-1.8,
    # direct update) staged compute ..."
    path = _as_recorded(tmp_path, "base", {"model": GEMMA, "checkpoint": "/ckpt/baseline"}, {**PAPER_SST, "layers": []})
    run = Run.open(path)
    assert ablation.role_of(run) == ablation.BASELINE
    label = _recorded_label(path)
    assert label.startswith("matched baseline (LoRA only, no state stream) on ")
    assert "SST" not in label and "staged compute" not in label


def test_the_untrained_demo_preset_is_labelled_untrained(tmp_path):
    # issue 44: the classifier ignored state_scale and called the untrained demo preset "the main SST"
    path = _as_recorded(tmp_path, "demo", {"model": GEMMA, "checkpoint": None},
                        {**PAPER_SST, "state_scale": "hidden"}, demo_preset=True)
    run = Run.open(path)
    assert ablation.role_of(run) == ablation.UNTRAINED
    assert _recorded_label(path).startswith(
        "untrained SST (theta_init=-1.8, direct update, state_scale=hidden, untrained) staged compute i_max=2")
    # nor is it a main run an ablation variant could be paired with
    assert ablation.pair_runs({"demo": run}).pairs == {}


def test_a_trained_hidden_scale_or_layer_subset_sst_is_not_the_main_one(tmp_path):
    hidden = ablation.Architecture(-1.8, "direct", state_scale="hidden")
    subset = ablation.Architecture(-1.8, "direct", layers=(0, 1))
    assert hidden.role == subset.role == ablation.OTHER
    assert "state_scale=hidden" in hidden.label() and "SST layers [0, 1]" in subset.label()
    path = _as_recorded(tmp_path, "main", {"model": GEMMA, "checkpoint": "/ckpt/sst"}, PAPER_SST)
    assert ablation.role_of(Run.open(path)) == ablation.MAIN
    assert _recorded_label(path).startswith("SST (theta_init=-1.8, direct update) staged compute i_max=2")


def test_a_manifest_too_old_to_classify_is_of_unknown_kind(tmp_path):
    path = _as_recorded(tmp_path, "old", {"model": GEMMA, "checkpoint": None}, None)
    assert ablation.role_of(Run.open(path)) == ablation.UNKNOWN
    assert _recorded_label(path).startswith("unknown kind (the manifest holds no SST config)")
