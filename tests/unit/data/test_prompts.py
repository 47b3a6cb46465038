"""Zero-shot templates and stop strings."""

from __future__ import annotations

import pytest

from sst_interp.data.prompts import (
    STOP_STRINGS,
    gsm8k_prompt,
    math_prompt,
    mcq_prompt,
    stop_strings,
    truncate_at_stop,
)
from sst_interp.kernels.errors import UsageError


def test_mcq_prompt_lists_lettered_options_and_asks_for_the_letter() -> None:
    prompt = mcq_prompt("  Which is largest? ", ["1", "3 ", "2", "0"])
    assert prompt == (
        "Answer the multiple-choice question with the letter of the correct option.\n\n"
        "Question: Which is largest?\nA) 1\nB) 3\nC) 2\nD) 0\nAnswer:"
    )
    with pytest.raises(UsageError, match="options"):
        mcq_prompt("q", ["only one"])


def test_gsm8k_and_math_prompts_end_where_the_model_continues() -> None:
    assert gsm8k_prompt("How many?").endswith("Question: How many?\nAnswer:")
    assert "The answer is N." in gsm8k_prompt("How many?")
    prompt = math_prompt("Solve $x=1$.")
    assert prompt.endswith("Problem: Solve $x=1$.\nSolution:")
    assert "\\boxed{}" in prompt


def test_every_source_has_stop_strings() -> None:
    assert set(STOP_STRINGS) == {"demo", "gsm8k", "gpqa", "math500", "humaneval", "hops"}
    assert stop_strings("hops") == ("?",)
    assert "\nQuestion:" in stop_strings("gsm8k")
    assert "\ndef " in stop_strings("humaneval")
    with pytest.raises(UsageError, match="known"):
        stop_strings("nope")


def test_truncate_at_the_earliest_stop() -> None:
    assert truncate_at_stop(" B\nQuestion: next one\nA) x", "gpqa") == " B"
    code = "    return 1\n\n\ndef other():\n    pass\n#x"
    assert truncate_at_stop(code, "humaneval") == "    return 1\n\n"
    assert truncate_at_stop("    x = 1\n    # comment kept\n", "humaneval") == "    x = 1\n    # comment kept\n"
    assert truncate_at_stop(" 14\n\n15", "demo") == " 14"
    assert truncate_at_stop("no stop here", "gsm8k") == "no stop here"
