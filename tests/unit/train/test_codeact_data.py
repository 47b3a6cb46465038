"""CodeACT traces from the real GSM8K train file: code, execution filter, exact format, determinism, split."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from sst_interp.codeact.format import ActionFormat
from sst_interp.codeact.prompts import SYSTEM_TEXTS
from sst_interp.cli.codeact_data import main, run
from sst_interp.train.codeact_traces import TraceError, final_answer, trace_code
from sst_interp.train.data import DataFormat, model_turn_spans

from tests.paths import BENCHMARK_FIXTURES

TRAIN = BENCHMARK_FIXTURES / "gsm8k" / "train.jsonl"  # GSM8K train's first 48 rows, real


def _rows(n):
    return [json.loads(line) for line in TRAIN.read_text().splitlines()[:n]]


def test_annotations_become_named_lines_that_reuse_earlier_results():
    first = _rows(1)[0]
    assert trace_code(first["answer"]) == "step1 = 48/2\nstep2 = 48+step1\nprint(step2)"
    assert final_answer(first["answer"]) == "72"


def test_unusable_solutions_say_why():
    with pytest.raises(TraceError, match="no calculator annotation"):
        trace_code("She has 5 apples.\n#### 5")
    with pytest.raises(TraceError, match="not plain arithmetic"):
        trace_code("x <<abs(-3)=3>>3\n#### 3")
    with pytest.raises(TraceError, match="does not evaluate"):
        trace_code("x <<3/0=0>>0\n#### 0")
    with pytest.raises(TraceError, match="no #### answer"):
        final_answer("no final line")


def test_cli_writes_exact_deterministic_traces(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    stats = run(["--gsm8k", str(TRAIN), "--out", str(a), "--limit", "48"])
    main(["--gsm8k", str(TRAIN), "--out", str(b), "--limit", "48"])
    for name in ("train.jsonl", "validation.jsonl", "stats.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    assert stats["kept"] + sum(stats["dropped"].values()) == 48 == stats["rows"]
    assert stats["train"] + stats["validation"] == stats["kept"] and stats["validation"] == round(0.1 * stats["kept"])
    assert "kept" in capsys.readouterr().out
    rows = _rows(48)
    fmt = ActionFormat()
    seen = set()
    for name in ("train.jsonl", "validation.jsonl"):
        for line in (a / name).read_text().splitlines():
            record = json.loads(line)
            row = rows[record["gsm8k_row"]]
            seen.add(record["gsm8k_row"])
            text = record["text"]
            question = fmt.first_turn(SYSTEM_TEXTS["gsm8k"], row["question"].strip())
            code = trace_code(row["answer"])
            pattern = (re.escape(question + f"<execute>\n{code}\n</execute><end_of_turn>\n<start_of_turn>user\n"
                                 "<tool_response>\n") + r"(?P<out>[^\n]+)"
                       + re.escape("\n</tool_response><end_of_turn>\n<start_of_turn>model\n\n<execute>\n"
                                   f'finish_session("The answer is {final_answer(row["answer"])}.")\n'
                                   "</execute><end_of_turn>"))
            match = re.fullmatch(pattern, text)
            assert match, text[-300:]
            assert float(match.group("out")) == float(final_answer(row["answer"]))
            # train masks exactly the two model turns (the code turn and the finish turn)
            spans = model_turn_spans(text, DataFormat())
            assert [text[s:e] for s, e in spans] == [
                f"\n\n<execute>\n{code}\n</execute><end_of_turn>",
                f'\n\n<execute>\nfinish_session("The answer is {final_answer(row["answer"])}.")\n</execute>'
                "<end_of_turn>"]
    assert len(seen) == stats["kept"]


def test_missing_file_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--gsm8k", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1
