"""One-shot programs (HumanEval grading) through the sandbox."""

from __future__ import annotations

import pytest

from sst_interp.data.code_exec import humaneval_program
from sst_interp.data.grading import grade_humaneval
from sst_interp.data.question import Question
from sst_interp.sandbox import ExecutionResult, SandboxConfig, run_program

pytestmark = pytest.mark.usefixtures("bwrap")

PROMPT = 'def add_one(x: int) -> int:\n    """Return x plus one."""\n'
CHECK = "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(-1) == 0\n\ncheck(add_one)\n"


def test_correct_solution_passes_and_wrong_one_fails() -> None:
    assert run_program(humaneval_program(PROMPT, "    return x + 1\n", CHECK)) == ExecutionResult(True, "passed")
    wrong = run_program(humaneval_program(PROMPT, "    return x\n", CHECK))
    assert not wrong.passed and wrong.status == "failed: AssertionError"


def test_grade_humaneval_uses_the_given_sandbox() -> None:
    question = Question("t", "humaneval", PROMPT, CHECK, [], {})
    assert grade_humaneval(question, "    return x + 1\n", sandbox=SandboxConfig(timeout_s=30.0)).correct
    # the given limit, not the default 10 s, is the one that killed the loop
    looping = grade_humaneval(question, "    while True:\n        pass\n", sandbox=SandboxConfig(timeout_s=1.0))
    assert (looping.correct, looping.extracted_answer) == (False, "timeout after 1 s")


def test_programs_are_isolated_like_sessions() -> None:
    program = (
        "import os, socket\n"
        "assert os.getuid() != 0\n"
        "assert os.listdir('.') == [], os.listdir('.')\n"
        "try:\n"
        "    socket.socket()\n"
        "except OSError as err:\n"
        "    assert 'disabled' in str(err)\n"
        "else:\n"
        "    raise SystemExit('socket worked')\n"
    )
    assert run_program(program).passed


def test_a_crash_without_output_names_its_cause() -> None:
    result = run_program("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    assert not result.passed and result.status.startswith("failed: killed by SIGKILL")


def test_subprocess_backend_runs_programs_too() -> None:
    config = SandboxConfig(backend="subprocess")
    assert run_program("print('ok')", config).passed
    assert not run_program("raise ValueError('no')", config).passed
