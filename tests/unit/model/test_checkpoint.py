"""SST checkpoints: round trip and refusal of mismatched backbones."""

import pytest
import torch

from sst_interp.kernels.errors import UsageError
from sst_interp.model import SSTConfig
from sst_interp.model.checkpoint import load_checkpoint, save_checkpoint
from sst_interp.model.testing import tiny_gemma3, tiny_llama

from .conftest import make_sst


def test_checkpoint_round_trip_reproduces_identical_logits(tmp_path, tokenizer):
    sst = make_sst("gemma3", update="ema_linked")
    with torch.no_grad():  # move the parameters off their init so the round trip has something to carry
        for param in sst.state_parameters():
            param.add_(torch.randn_like(param) * 0.3)
    ids = torch.tensor([tokenizer("round trip").input_ids])
    expected = sst.lm_logits(sst.two_pass_hidden(ids)).detach()
    save_checkpoint(sst, tmp_path / "ckpt", backbone_id="tiny-gemma3")
    loaded = load_checkpoint(tiny_gemma3(), tmp_path / "ckpt")
    assert loaded.config == sst.config
    got = loaded.lm_logits(loaded.two_pass_hidden(ids)).detach()
    assert torch.equal(got, expected)
    fresh = make_sst("gemma3", update="ema_linked")
    assert not torch.equal(fresh.lm_logits(fresh.two_pass_hidden(ids)).detach(), expected)


def test_checkpoint_for_another_backbone_is_refused(tmp_path):
    save_checkpoint(make_sst("llama"), tmp_path / "ckpt", backbone_id="tiny-llama")
    with pytest.raises(UsageError, match="made for a backbone with 3 layers and hidden size 32"):
        load_checkpoint(tiny_llama(hidden_size=48), tmp_path / "ckpt")
    with pytest.raises(UsageError, match="made for a backbone with 3 layers"):
        load_checkpoint(tiny_llama(num_layers=4), tmp_path / "ckpt")


def test_missing_checkpoint_files_are_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="missing sst_config.json, sst_state.safetensors"):
        load_checkpoint(tiny_llama(), tmp_path / "empty")


def test_unknown_config_keys_are_refused():
    with pytest.raises(UsageError, match="unknown SST config keys"):
        SSTConfig.from_dict({"a_min": 0.01, "a_maxx": 0.2})
