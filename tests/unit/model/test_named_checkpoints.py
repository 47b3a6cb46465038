"""The shipped checkpoints (the CodeACT demo's and the SST organism's): names resolve to installed folders, the
files are what the loaders need, they stay small, the CodeACT demo's recipe is the --codeact-demo preset, and a
wheel carries them."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from dataclasses import asdict
from pathlib import Path

import pytest

from sst_interp.checkpoints import NAMED_CHECKPOINTS, NAMED_MODELS, named_checkpoint_folder, resolve_checkpoint
from sst_interp.kernels.errors import UsageError
from sst_interp.model.baseline_checkpoint import is_baseline_checkpoint
from sst_interp.model.checkpoint import read_checkpoint_config
from sst_interp.record.options import RecordOptions
from sst_interp.train.config import codeact_demo_config

ROOT = Path(__file__).resolve().parents[3]
#: the issue's size limit for a shipped checkpoint
MAX_BYTES = 10 * 1024 * 1024
#: the CodeACT demo's checkpoints (Gemma 3 270M, made by the --codeact-demo preset)
CODEACT_DEMO = ("demo-codeact", "demo-codeact-baseline")
#: the SST organism's (docs/organism.md): a 2-layer, d 128 Gemma 3 trained from scratch on the hops task
ORGANISM = ("hops-sst", "hops-sst-baseline")


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


@pytest.mark.parametrize("name", sorted(NAMED_CHECKPOINTS))
def test_named_checkpoint_has_weights_logs_and_recipe(name):
    folder = named_checkpoint_folder(name)
    assert Path(resolve_checkpoint(name)) == folder
    assert (folder / "adapter" / "adapter_model.safetensors").is_file()
    assert (folder / "adapter" / "adapter_config.json").is_file()
    assert (folder / "train_log.csv").is_file() and (folder / "TRAINING.md").is_file()
    assert folder_bytes(folder) <= MAX_BYTES, f"{name} is {folder_bytes(folder) / 2**20:.1f} MiB"
    assert name in CODEACT_DEMO + ORGANISM  # a new named checkpoint gets its own checks here
    if name.endswith("baseline"):
        assert is_baseline_checkpoint(folder)
        return
    meta = read_checkpoint_config(folder)
    assert (folder / "alpha_log.csv").is_file() and meta["sst"]["state_scale"] == "unit"
    if name in CODEACT_DEMO:
        assert meta["num_layers"] == 18 and meta["hidden_size"] == 640
        assert meta["extra"]["action_tokens"] == {"<execute>": 262140, "</execute>": 262141}
    else:
        assert meta["num_layers"] == 2 and meta["hidden_size"] == 128


@pytest.mark.parametrize("name", CODEACT_DEMO)
def test_shipped_training_config_is_the_codeact_demo_preset(name):
    shipped = json.loads((named_checkpoint_folder(name) / "train_config.json").read_text())["config"]
    preset = asdict(codeact_demo_config(baseline=name.endswith("baseline")))
    # paths and the output folder are the machine's; the preset name was recorded before the preset existed
    differing = {k for k in shipped if shipped[k] != preset[k]} - {"out", "train_data", "val_data", "preset"}
    assert differing == set(), {k: (shipped[k], preset[k]) for k in differing}


def test_resolution_leaves_paths_alone_and_prefers_a_local_folder(tmp_path, monkeypatch):
    assert resolve_checkpoint(None) is None
    assert resolve_checkpoint("runs/train/best") == "runs/train/best"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo-codeact").mkdir()
    assert resolve_checkpoint("demo-codeact") == "demo-codeact"
    with pytest.raises(UsageError, match="named checkpoints are demo-codeact"):
        named_checkpoint_folder("demo-nothing")


def test_codeact_record_defaults_to_the_demo_checkpoint_only_without_model_or_checkpoint():
    args = RecordOptions(protocol="codeact")
    assert args.use_default_codeact_checkpoint()
    assert Path(args.checkpoint) == named_checkpoint_folder("demo-codeact")
    for given in (RecordOptions(protocol="codeact", model="some/folder"), RecordOptions(protocol="completion"),
                  RecordOptions(protocol="codeact", checkpoint="mine")):
        assert not given.use_default_codeact_checkpoint()
    named = RecordOptions(protocol="codeact", checkpoint="demo-codeact-baseline")
    named.validate()
    assert Path(named.checkpoint) == named_checkpoint_folder("demo-codeact-baseline")


def test_train_codeact_demo_needs_the_trace_files(capsys):
    from sst_interp.cli.train import main

    with pytest.raises(SystemExit) as stop:
        main(["--codeact-demo"])
    assert stop.value.code == 2
    assert "python -m sst_interp.train.codeact_data" in capsys.readouterr().err


@pytest.mark.slow
def test_a_built_wheel_carries_the_checkpoints(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True, cwd=tmp_path)
    wheel = next(tmp_path.glob("sst_interp-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in (*NAMED_CHECKPOINTS, *NAMED_MODELS):
        folder = named_checkpoint_folder(name)
        for file in folder.rglob("*"):
            if file.is_file():
                assert f"sst_interp/checkpoints/{file.relative_to(folder.parent).as_posix()}" in names


def test_report_reads_the_shipped_training_logs_and_alpha_by_name(tmp_path, capsys):
    from sst_interp.cli.report import main as report_main
    from tests.unit.reporting.builders import write_tiny_run

    write_tiny_run(tmp_path / "run")
    out = tmp_path / "report"
    report_main(["--run", str(tmp_path / "run"), "--out", str(out), "--quiet", "--checkpoint", "demo-codeact",
                 "--training-log", "demo-codeact", "--training-log", "demo-codeact-baseline",
                 "--only", "fig_sst_vs_baseline_loss,fig_alpha_global_stats_over_training,fig_alpha_quantile_ribbon"])
    assert "wrote 3 artefacts" in capsys.readouterr().out
    for name in ("fig_sst_vs_baseline_loss", "fig_alpha_global_stats_over_training", "fig_alpha_quantile_ribbon"):
        assert (out / f"{name}.png").is_file()
