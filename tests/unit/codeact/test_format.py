"""The CodeACT strings, code extraction, tool-output capping and the per-source first turn (no model)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sst_interp.codeact.episode import tool_output_text, turn_stop_reason
from sst_interp.codeact.format import ActionFormat, decode_with_actions, encode_with_actions, extract_code
from sst_interp.codeact.prompts import SYSTEM_TEXTS, codeact_question, task_text
from sst_interp.data import load_questions
from sst_interp.data.question import Question
from sst_interp.kernels.errors import UsageError
from tests.unit.codeact.scripted import FORMAT, tokenizer

from tests.paths import BENCHMARK_FIXTURES as SHARED  # real first rows of each benchmark, in the repository


def test_first_turn_and_tool_turn_are_the_dataset_format_strings():
    fmt = ActionFormat()
    assert fmt.first_turn("SYS", "Q?") == "<bos><start_of_turn>user\nSYS\n\nQ?<end_of_turn>\n<start_of_turn>model\n\n"
    assert fmt.tool_turn("42") == ("<end_of_turn>\n<start_of_turn>user\n<tool_response>\n42\n</tool_response>"
                                   "<end_of_turn>\n<start_of_turn>model\n\n")
    assert dict(fmt.action_tokens) == {"<execute>": 262140, "</execute>": 262141}


def test_action_tokens_round_trip_through_their_reserved_ids():
    tok = tokenizer()
    text = "<start_of_turn>model\n\n<execute>\nprint(1)\n</execute><end_of_turn>"
    ids, _ = encode_with_actions(text, tok, FORMAT.action_tokens)
    start, end = tok.convert_tokens_to_ids(["<start_of_turn>", "<end_of_turn>"])
    assert ids.count(120) == 1 and ids.count(121) == 1 and ids.count(start) == 1 and ids.count(end) == 1
    assert decode_with_actions(ids, tok, FORMAT.action_tokens) == text


@pytest.mark.parametrize("turn, code", [
    ("<execute>\nx = 1\nprint(x)\n</execute>", "x = 1\nprint(x)"),
    ("Let me compute.\n<execute>\nprint(2)\n</execute>", "print(2)"),
    ("print(3)\n</execute>", "print(3)"),  # a block closed but never opened still runs
    ("<execute>\nprint(4)", None),  # never closed: nothing runs
    ("The answer is 5.<end_of_turn>", None),
])
def test_extract_code(turn, code):
    assert extract_code(turn) == code


def test_tool_output_is_stdout_then_stderr_capped_with_a_marker():
    assert tool_output_text("42\n", "", 100) == "42"
    assert tool_output_text("a\n", "Traceback: boom\n", 100) == "a\nTraceback: boom"
    assert tool_output_text("a", "err", 100) == "a\nerr"
    long = tool_output_text("x" * 50, "", 10)
    assert long == "x" * 10 + "\n... [truncated 40 chars]"


def test_turn_stop_reason_reads_the_last_token():
    assert turn_stop_reason([5, 121], FORMAT, 101, {1}) == "execute"
    assert turn_stop_reason([5, 101], FORMAT, 101, {1}) == "end_of_turn"
    assert turn_stop_reason([5, 1], FORMAT, 101, {1}) == "eos"
    assert turn_stop_reason([5, 6], FORMAT, 101, {1}) == "max_new_tokens"


def test_gsm8k_task_is_the_question_itself():
    questions = load_questions("gsm8k", str(SHARED / "gsm8k"))[:5]
    rows = [json.loads(line) for line in (SHARED / "gsm8k" / "test.jsonl").read_text().splitlines()[:5]]
    for question, row in zip(questions, rows):
        assert task_text(question) == row["question"].strip()
        converted = codeact_question(question)
        assert converted.prompt == ActionFormat().first_turn(SYSTEM_TEXTS["gsm8k"], row["question"].strip())
        assert converted.reference == question.reference and converted.question_id == question.question_id


def test_every_source_has_a_first_turn():
    for source in ("math500", "humaneval"):
        question = load_questions(source, str(SHARED))[0]
        prompt = codeact_question(question).prompt
        assert prompt.startswith("<bos><start_of_turn>user\n" + SYSTEM_TEXTS[source] + "\n\n")
        assert prompt.endswith("<end_of_turn>\n<start_of_turn>model\n\n")
    humaneval = load_questions("humaneval", str(SHARED))[0]
    assert codeact_question(humaneval).metadata["task_prompt"] == humaneval.prompt
    gpqa = load_questions("gpqa", str(Path(__file__).resolve().parents[2] / "data" / "gpqa_tiny.csv"))[0]
    body = task_text(gpqa)
    assert "\nA) " in body and not body.endswith("Answer:") and not body.startswith("Answer the")


def test_a_prompt_outside_its_template_is_refused():
    with pytest.raises(UsageError, match="completion template"):
        task_text(Question("q", "gsm8k", "just some text", "1"))
    with pytest.raises(UsageError, match="no CodeACT prompt"):
        codeact_question(Question("q", "mystery", "text", "1"))
