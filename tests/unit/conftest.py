"""Fixtures and helpers shared by the unit tests: one torch thread, tiny random models, fast ``record`` flags.

Directories whose tests all run tiny models opt into :func:`one_thread` with an autouse fixture in their own
conftest (``hooks``, ``train``); single modules with ``pytestmark = pytest.mark.usefixtures("one_thread")``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedModel

from sst_interp.model.testing import (char_tokenizer, tiny_dory, tiny_gemma3, tiny_hrm_text, tiny_inkling2_loop,
                                      tiny_llama)

TINY_BUILDERS = {"gemma3": tiny_gemma3, "llama": tiny_llama, "hrm_text": tiny_hrm_text,
                 "inkling2_loop": tiny_inkling2_loop, "dory": tiny_dory}

#: the report's artefacts of a looping family's run (``fig_family_*``, ``tab_family_*``)
FAMILY_ARTEFACTS = ("fig_family_state", "fig_family_capacity", "tab_family_convergence")

#: ``record`` flags for a run of a few seconds on a CPU: small windows and short answers.
FAST = ["--questions", "demo", "--max-new-tokens", "5", "--full-positions", "2", "--sketch-positions", "2",
        "--top-k", "6", "--device", "cpu"]


def tiny_backbone(family: str = "gemma3", dtype: torch.dtype = torch.float64, seed: int = 0) -> PreTrainedModel:
    """A tiny random backbone of ``family`` (``gemma3``, ``llama``, ``hrm_text`` or ``inkling2_loop``), see
    :mod:`sst_interp.model.testing`."""
    return TINY_BUILDERS[family](dtype=dtype, seed=seed)


def save_tiny_model(folder: Path, family: str = "gemma3", seed: int = 0) -> Path:
    """Write a tiny random model (float32) and the character tokenizer as a Hugging Face folder."""
    tiny_backbone(family, dtype=torch.float32, seed=seed).save_pretrained(folder)
    char_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One torch intra-op thread: tiny models run ~10x faster so on a shared, busy 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def fails_with_one_error_line(capsys, main, argv: list[str], pattern: str) -> None:
    """``main(argv)`` exits 2 with exactly one ``error:`` line holding ``pattern`` on stderr and no traceback (other
    stderr lines, such as a model's loading progress bar, may come before it)."""
    capsys.readouterr()  # what earlier successful runs printed
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and pattern in errors[0] and "Traceback" not in err, err


def completed_question_depths(out: Path) -> int:
    """How many question-depths the manifest at ``out`` marks complete (0 while it is absent or being replaced)."""
    try:
        status = json.loads((out / "manifest.json").read_text())["status"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return 0
    return sum(len(ids) for ids in status.values())
