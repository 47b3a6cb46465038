"""Helpers for the record tests (no tests here): tiny model folders the CLI loads like any local model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sst_interp.model.testing import char_tokenizer, tiny_gemma3, tiny_llama

# small windows and short answers keep a CPU run to a few seconds
FAST = ["--questions", "demo", "--max-new-tokens", "5", "--full-positions", "2", "--sketch-positions", "2",
        "--top-k", "6", "--device", "cpu"]


def save_tiny_model(folder: Path, family: str = "gemma3", seed: int = 0) -> Path:
    """Write a tiny random model (float32) and the character tokenizer as a Hugging Face folder."""
    builder = {"gemma3": tiny_gemma3, "llama": tiny_llama}[family]
    model = builder(dtype=torch.float32, seed=seed)
    model.save_pretrained(folder)
    char_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run ~10x faster on one intra-op thread on a shared, busy 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
