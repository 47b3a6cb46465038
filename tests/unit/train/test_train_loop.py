"""The training loop on tiny models: order, learning, resume, logs, early stopping, checkpoints, CLI errors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from sst_interp.analyses.alpha import global_stats_over_training
from sst_interp.kernels.errors import UsageError
from sst_interp.model import GenerationConfig, SSTConfig, SSTModel, generate
from sst_interp.model.checkpoint import load_checkpoint
from sst_interp.model.testing import tiny_gemma3
from sst_interp.cli.train import main
from sst_interp.train.logs import ALPHA_COLUMNS, TRAIN_COLUMNS
from sst_interp.train.loop import Trainer, TrainObserver

from .conftest import chat_tokenizer, tiny_backbone, tiny_config, write_jsonl


class Recorder(TrainObserver):
    def __init__(self, stop_after: int | None = None) -> None:
        self.order: list[tuple[int, tuple]] = []
        self.rows: list[dict] = []
        self.stop_after = stop_after

    def on_micro_batch(self, step, batch):
        self.order.append((step, tuple(batch.example_indices)))

    def on_step_end(self, step, row):
        self.rows.append(dict(row))
        if self.stop_after is not None and step >= self.stop_after:
            raise KeyboardInterrupt  # an interruption right after step `stop_after` was saved


def _trainer(config, observer=None):
    return Trainer(config, backbone=tiny_backbone(), tokenizer=chat_tokenizer(), backbone_id="tiny-gemma3",
                   observer=observer, progress=False)


def test_baseline_and_sst_see_the_same_examples_in_the_same_order(tmp_path):
    orders = {}
    for baseline in (False, True):
        recorder = Recorder()
        config = tiny_config(tmp_path, baseline=baseline, out=str(tmp_path / f"run{baseline}"), max_steps=4)
        _trainer(config, recorder).run()
        orders[baseline] = recorder.order
    # file order, no shuffling, two micro-batches per step, wrapping after the 6 examples
    expected = [(1, ((0,),)), (1, ((1,),)), (2, ((2,),)), (2, ((3,),)), (3, ((4,),)), (3, ((5,),)),
                (4, ((0,),)), (4, ((1,),))]
    assert orders[False] == expected
    assert orders[True] == expected


def test_a_few_steps_reduce_the_loss(tmp_path):
    config = tiny_config(tmp_path, max_steps=12, lr_lora=3e-2, warmup_steps=0, eval_every=12)
    trainer = _trainer(config)
    before = trainer.validate()
    result = trainer.run()
    after = result.log["val_loss"].dropna().iloc[-1]
    assert after < 0.8 * before
    assert result.log["train_loss"].iloc[-1] < 0.8 * result.log["train_loss"].iloc[0]


def test_resume_gives_the_same_next_step_loss(tmp_path):
    # dropout on, so the restored random generator state matters too
    settings = dict(max_steps=4, lora_dropout=0.05, lr_lora=1e-2)
    full = Recorder()
    _trainer(tiny_config(tmp_path, out=str(tmp_path / "full"), **settings), full).run()

    interrupted = Recorder(stop_after=2)
    config = tiny_config(tmp_path, out=str(tmp_path / "resumed"), **settings)
    with pytest.raises(KeyboardInterrupt):
        _trainer(config, interrupted).run()
    resumed_recorder = Recorder()
    resumed = _trainer(config, resumed_recorder)
    assert resumed.resumed and resumed.step == 2
    resumed.run()
    assert [r["step"] for r in resumed_recorder.rows] == [3, 4]
    for got, want in zip(resumed_recorder.rows, full.rows[2:]):
        assert got["train_loss"] == pytest.approx(want["train_loss"], rel=1e-12)
        assert got["val_loss"] == pytest.approx(want["val_loss"], rel=1e-12)
    assert resumed_recorder.order == full.order[4:]
    log = pd.read_csv(tmp_path / "resumed" / "train_log.csv")
    assert log["step"].tolist() == [1, 2, 3, 4]  # no duplicated rows after the resume
    alpha = pd.read_csv(tmp_path / "resumed" / "alpha_log.csv")
    assert sorted(alpha["step"].unique()) == [0, 1, 2, 3, 4] and len(alpha) == 5 * 3


def test_logs_hold_loss_lr_and_alpha_statistics(tmp_path):
    config = tiny_config(tmp_path, max_steps=3)
    result = _trainer(config).run()
    log = pd.read_csv(tmp_path / "run" / "train_log.csv")
    assert tuple(log.columns) == TRAIN_COLUMNS
    assert log["val_loss"].notna().all() and (log["lr_sst"] == 1e-2).all()
    assert log["lr_lora"].tolist() == pytest.approx([0.0, 1e-4, 0.5e-4])  # warmup 1 step, cosine over 2
    alpha = pd.read_csv(tmp_path / "run" / "alpha_log.csv")
    assert tuple(alpha.columns) == ALPHA_COLUMNS
    initial = alpha[alpha["step"] == 0]
    assert np.allclose(initial["mean"], SSTConfig().alpha_init) and np.allclose(initial["std"], 0.0)
    # the last step's statistics are those of the saved checkpoint's alphas
    assert result.best_step == 3
    tensors = load_file(str(tmp_path / "run" / "best" / "sst_state.safetensors"))
    final = alpha[alpha["step"] == 3].sort_values("layer")
    for layer in range(3):
        theta = tensors[f"layers.{layer}.theta"].double().numpy()
        values = 0.015 + 0.085 / (1 + np.exp(-theta))
        row = final[final["layer"] == layer].iloc[0]
        assert row["mean"] == pytest.approx(values.mean(), rel=1e-6)
        assert row["p95"] == pytest.approx(np.percentile(values, 95), rel=1e-6)
        assert row["std"] > 0  # training moved the coefficients apart
    stats = global_stats_over_training(alpha).table()
    assert stats["step"].tolist() == [0, 1, 2, 3]


def test_early_stopping_keeps_the_best_checkpoint(tmp_path, monkeypatch):
    planted = iter([1.0, 0.9, 0.95, 0.91, 0.92, 0.93, 0.5, 0.4])
    monkeypatch.setattr(Trainer, "validate", lambda self: next(planted))
    result = _trainer(tiny_config(tmp_path, max_steps=8, patience=4)).run()
    assert (result.stop_reason, result.steps, result.best_step) == ("early_stopping", 6, 2)
    assert result.best_val_loss == 0.9
    meta = json.loads((tmp_path / "run" / "best" / "sst_config.json").read_text())
    assert meta["extra"]["step"] == 2 and meta["extra"]["val_loss"] == 0.9
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["stop_reason"] == "early_stopping" and summary["best_step"] == 2


def test_checkpoint_loads_into_generation_and_changes_its_output(tmp_path):
    config = tiny_config(tmp_path, max_steps=6, lr_lora=2e-2, lr_sst=5e-2, val_data=None, eval_every=6)
    result = _trainer(config).run()
    tokenizer = chat_tokenizer()
    prompts = [tokenizer("<bos><start_of_turn>user\n3+4?<end_of_turn>\n<start_of_turn>model\n",
                         add_special_tokens=False).input_ids]
    gen = GenerationConfig(max_new_tokens=12)
    untrained = SSTModel.from_backbone(tiny_gemma3(), SSTConfig(state_scale="hidden"))
    trained = load_checkpoint(tiny_gemma3(), result.best_checkpoint)
    assert trained.config.state_scale == "hidden"
    assert not torch.equal(trained.alphas(), untrained.alphas())
    before = generate(untrained, prompts, depth=2, config=gen).token_ids
    after = generate(trained, prompts, depth=2, config=gen).token_ids
    assert before != after


def test_a_different_run_in_the_out_folder_is_refused(tmp_path):
    _trainer(tiny_config(tmp_path, max_steps=1)).run()
    with pytest.raises(UsageError, match="holds another training run .*lora_r"):
        _trainer(tiny_config(tmp_path, max_steps=1, lora_r=8))


def test_cli_bad_input_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--train-data", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    assert "error: training data file not found" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "<start_of_turn>model\\nok"}\n{"text": \n')
    with pytest.raises(SystemExit) as exit_info:
        main(["--train-data", str(bad), "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    assert "line 2: not valid JSON" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["--train-data", str(bad), "--lora-r", "0"])
    assert exit_info.value.code == 2
    assert "lora_r must be at least 1" in capsys.readouterr().err


def test_rows_without_model_tokens_stop_the_trainer(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"text": "<bos><start_of_turn>user\nhello<end_of_turn>\n"}])
    with pytest.raises(UsageError, match="line 1: no model-turn tokens"):
        _trainer(tiny_config(tmp_path, train_data=str(path)))


def test_a_run_that_failed_before_saving_does_not_block_its_folder(tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"text": "<bos><start_of_turn>user\nhello<end_of_turn>\n"}])
    with pytest.raises(UsageError):
        _trainer(tiny_config(tmp_path, train_data=str(bad), max_steps=1))
    result = _trainer(tiny_config(tmp_path, max_steps=1)).run()  # same --out, fixed data
    assert result.steps == 1
