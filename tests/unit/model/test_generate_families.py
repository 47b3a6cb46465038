"""``python -m sst_interp.generate`` on every family ``record`` takes: the shipped looped organism (HRM-Text), Dory
(with ``--loop-option``) and a bring-your-own model (``--loop``, ``--trust-remote-code``) print each depth's
completion, the family's own greedy generation; the SST-only flags and a declaration the model does not follow are
one ``error:`` line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from sst_interp.cli.generate import main
from sst_interp.model.generation import GenerationConfig
from sst_interp.model.loop_file import load_loop_file
from sst_interp.model.loop_model import LoopModel, generate_looped, load_loop_backbone
from sst_interp.model.testing import tiny_dory
from tests.unit.byo import LOOP_FILE, save_toy_huginn
from tests.unit.conftest import fails_with_one_error_line, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


def _completions(out: str) -> dict[int, str]:
    """``{depth: completion}`` from generate's output (a ``--- depth D (...)`` line, then the text)."""
    lines = out.splitlines()
    return {int(line.split()[2]): lines[n + 1] if n + 1 < len(lines) else ""
            for n, line in enumerate(lines) if line.startswith("--- depth ")}


def test_the_organism_answers_at_depths_1_to_4(capsys) -> None:
    """The issue's command: the organism (HRM-Text) answers the 2-hop question c -> b -> a -> 7 at every depth
    (it then repeats the answer: it was trained on answers, not on when to stop)."""
    assert main(["--model", "hops-organism", "--prompt", "c=b a=7 b=a ?c"]) == 0
    completions = _completions(capsys.readouterr().out)
    assert sorted(completions) == [1, 2, 3, 4]
    assert all(text.split()[0] == "7" for text in completions.values()), completions


@pytest.mark.parametrize("mode", ["per_loop", "last_loop"])
def test_dory_prints_its_own_greedy_generation_at_each_depth(tmp_path: Path, capsys, mode: str) -> None:
    folder = save_tiny_model(tmp_path / "dory", "dory")
    assert main(["--model", str(folder), "--prompt", "abc", "--depths", "1,3", "--max-new-tokens", "6",
                 "--loop-option", f"recurrent_kv_cache_mode={mode}"]) == 0
    completions = _completions(capsys.readouterr().out)
    model = LoopModel(tiny_dory(cache_mode=mode, dtype=torch.float32))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    for depth in (1, 3):
        tokens = generate_looped(model, [tokenizer("abc").input_ids], depth,
                                 GenerationConfig(max_new_tokens=6)).token_ids[0]
        assert completions[depth] == tokenizer.decode(tokens, skip_special_tokens=True)


def test_a_model_of_your_own_prints_each_depth(tmp_path: Path, capsys) -> None:
    folder = save_toy_huginn(tmp_path / "toy", dtype=torch.float64)
    spec = f"{LOOP_FILE}:TOY_HUGINN"
    assert main(["--model", str(folder), "--loop", spec, "--trust-remote-code", "--prompt", "hello",
                 "--depths", "1,2", "--max-new-tokens", "5"]) == 0
    out = capsys.readouterr()
    completions = _completions(out.out)
    loop = load_loop_file(spec)
    backbone, tokenizer = load_loop_backbone(str(folder), loop, dtype="float64", trust_remote_code=True)
    model = LoopModel(backbone, loop)
    for depth in (1, 2):
        tokens = generate_looped(model, [tokenizer("hello").input_ids], depth,
                                 GenerationConfig(max_new_tokens=5)).token_ids[0]
        assert completions[depth] == tokenizer.decode(tokens, skip_special_tokens=True)


@pytest.mark.parametrize("argv, phrase", [
    (["--checkpoint", "hops-sst"], "--checkpoint loads an SST checkpoint; hrm_text has none (drop the flag)"),
    (["--prompt-mode", "none"], "--prompt-mode says how the prompt runs through the SST state stream; hrm_text "
                                "has none"),
    (["--compile", "on"], "hrm_text generates eager, on one device"),
    (["--depths", "0"], "invalid depth list '0'"),
    (["--loop-option", "recurrent_kv_cache_mode=last_loop"], "hrm_text declares no such setting"),
])
def test_what_a_family_cannot_take_is_one_error_line(capsys, argv: list[str], phrase: str) -> None:
    fails_with_one_error_line(capsys, main, ["--model", "hops-organism", "--prompt", "c=7 ?c", *argv], phrase)


def test_a_declaration_the_model_does_not_follow_is_refused_before_generating(tmp_path: Path, capsys) -> None:
    folder = save_toy_huginn(tmp_path / "toy")
    loop = tmp_path / "long.py"
    loop.write_text("from sst_interp.model.loops import looped_block\n"
                    "LONG = looped_block(family='long', head='lm_head', norm='ln_f', depth_key='mean_recurrence', "
                    "layers=lambda c: ['prelude.0', 'core_block.0', 'core_block.1', 'coda.0'], "
                    "looped=lambda c: (1, 4))\n")
    fails_with_one_error_line(capsys, main, ["--model", str(folder), "--loop", f"{loop}:LONG", "--trust-remote-code",
                                             "--prompt", "x"], "layer coda.0 was called 1 time at depth 2")
    assert "--- depth" not in capsys.readouterr().out


def test_loop_option_on_an_sst_is_one_error_line(capsys) -> None:
    fails_with_one_error_line(capsys, main, ["--prompt", "x", "--loop-option", "a=b"],
                              "--loop-option sets a looped family's setting; an SST has none")
