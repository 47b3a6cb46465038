"""Fixtures: the scripted CodeACT model (trained once per session, see scripted.py) and the real sandbox."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from sst_interp.model.sst import SSTModel
from sst_interp.sandbox import SandboxConfig, check_backend
from tests.unit.codeact.scripted import save_scripted_model


@pytest.fixture(scope="session")
def sandbox_config() -> SandboxConfig:
    config = SandboxConfig(timeout_s=10.0)
    check_backend(config)  # fails loudly (with the apt-get line) when bubblewrap is missing
    return config


@pytest.fixture(scope="session")
def scripted_dir(tmp_path_factory, sandbox_config):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return save_scripted_model(tmp_path_factory.mktemp("scripted") / "model", sandbox_config)
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def scripted(scripted_dir):
    """(SST over the scripted backbone, its tokenizer): a fresh SST each test (the conversion is in place)."""
    torch.set_num_threads(1)
    backbone = AutoModelForCausalLM.from_pretrained(scripted_dir, dtype=torch.float32).eval()
    return SSTModel.from_backbone(backbone), AutoTokenizer.from_pretrained(scripted_dir)
