"""Fixtures for the training tests: tiny models, a chat-capable character tokenizer, small JSONL files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sst_interp.model.testing import char_tokenizer
from sst_interp.train.config import TrainConfig
from tests.unit.conftest import tiny_backbone  # noqa: F401 - the training tests import it from here

ACTIONS = {"<execute>": 126, "</execute>": 127}


def chat_tokenizer():
    """The character tokenizer plus Gemma's turn delimiters as added special tokens (ids 102, 103)."""
    tokenizer = char_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"]})
    return tokenizer


@pytest.fixture(autouse=True)
def _one_thread(one_thread: None) -> None:
    """Every training test runs tiny models on one torch thread (``one_thread`` is in tests/unit/conftest.py)."""


@pytest.fixture(scope="session")
def tokenizer():
    return chat_tokenizer()


def chat(question: str, code: str, output: str, answer: str) -> str:
    """A two-model-turn CodeACT-style example in the paper's format (app:dataset_format)."""
    return (
        f"<bos><start_of_turn>user\n{question}<end_of_turn>\n<start_of_turn>model\n<execute>{code}</execute>"
        f"<end_of_turn>\n<start_of_turn>user\n{output}<end_of_turn>\n<start_of_turn>model\n{answer}<end_of_turn>\n"
    )


def chat_rows(n: int, offset: int = 0) -> list[dict[str, str]]:
    rows = []
    for i in range(offset, offset + n):
        a, b = i % 7 + 1, i % 5 + 2
        rows.append({"text": chat(f"{a}+{b}?", f"print({a}+{b})", str(a + b), f"ans {a + b}")})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def tiny_config(tmp_path: Path, **overrides) -> TrainConfig:
    """A config for tiny models: small LoRA, no dropout, few steps, float64-friendly."""
    settings = dict(
        train_data=str(write_jsonl(tmp_path / "train.jsonl", chat_rows(6))),
        val_data=str(write_jsonl(tmp_path / "val.jsonl", chat_rows(2, offset=40))),
        out=str(tmp_path / "run"),
        action_tokens=dict(ACTIONS),
        lora_r=4,
        lora_alpha=4.0,
        lora_dropout=0.0,
        grad_accum=2,
        max_steps=3,
        warmup_steps=1,
        eval_every=1,
        state_scale="hidden",
        device="cpu",
        quantize="none",
        gradient_checkpointing=False,
    )
    settings.update(overrides)
    return TrainConfig(**settings)
