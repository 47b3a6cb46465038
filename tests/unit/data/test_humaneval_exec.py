"""HumanEval grading by execution in a subprocess: pass, fail, timeout, no network, temporary directory."""

from __future__ import annotations

from pathlib import Path

from sst_interp.data import grade, load_questions
from sst_interp.data.code_exec import run_program
from sst_interp.data.grading import grade_humaneval


def test_fixture_canonical_passes_and_wrong_fails(fixtures: Path) -> None:
    add_one, double_all = load_questions("humaneval", fixtures / "humaneval_tiny.jsonl.gz")
    passed = grade(add_one, add_one.metadata["canonical_solution"])
    assert (passed.correct, passed.extracted_answer, passed.grader) == (True, "passed", "humaneval_exec")
    failed = grade(double_all, "    return values\n")
    assert not failed.correct
    assert failed.extracted_answer.startswith("failed: AssertionError")
    syntax = grade(add_one, "    return (\n")
    assert not syntax.correct and "SyntaxError" in syntax.extracted_answer


def test_completion_is_cut_at_stop_strings(fixtures: Path) -> None:
    add_one = load_questions("humaneval", fixtures / "humaneval_tiny.jsonl.gz")[0]
    # the trailing top-level statement would fail the run if it were kept
    assert grade(add_one, "    return x + 1\n\nassert False\n").correct


def test_timeout_kills_the_program(fixtures: Path) -> None:
    add_one = load_questions("humaneval", fixtures / "humaneval_tiny.jsonl.gz")[0]
    result = grade_humaneval(add_one, "    while True:\n        pass\n", timeout_s=1.0)
    assert not result.correct and result.extracted_answer == "timeout after 1 s"


def test_network_is_disabled_in_the_child() -> None:
    program = (
        "import socket\n"
        "for make in (lambda: socket.socket(), lambda: socket.create_connection(('127.0.0.1', 9))):\n"
        "    try:\n"
        "        make()\n"
        "    except OSError as err:\n"
        "        assert 'disabled' in str(err)\n"
        "    else:\n"
        "        raise SystemExit(3)\n"
    )
    assert run_program(program, timeout_s=10).passed
    assert not run_program("raise SystemExit(3)\n", timeout_s=10).passed


def test_runs_in_a_fresh_private_directory(tmp_path: Path) -> None:
    program = (
        "import os\n"
        "cwd = os.getcwd()\n"
        "assert cwd == os.environ['HOME'] == os.environ['TMPDIR'], cwd\n"
        "assert os.listdir(cwd) == [], os.listdir(cwd)\n"  # nothing of an earlier program is left
        "open('left_behind.txt', 'w').write('x')\n"
        f"assert not os.path.exists({str(tmp_path / 'left_behind.txt')!r})\n"
    )
    assert run_program(program, timeout_s=10).passed
    assert run_program(program, timeout_s=10).passed
    assert not (Path.cwd() / "left_behind.txt").exists()


def test_real_canonical_solutions_pass_and_empty_bodies_fail(shared_data: Path) -> None:
    tasks = load_questions("humaneval", shared_data, ids=["HumanEval/0", "HumanEval/32", "HumanEval/163"])
    for task in tasks:
        assert grade(task, task.metadata["canonical_solution"]).correct, task.question_id
    assert not grade(tasks[0], "    return None\n").correct


def test_memory_cap_stops_huge_allocations() -> None:
    result = run_program("x = bytearray(2 * 1024 ** 3)\n", timeout_s=10, memory_mb=256)
    assert not result.passed and "MemoryError" in result.status


def test_fixture_canonical_solutions_pass_and_empty_bodies_fail(benchmark_fixtures: Path) -> None:
    """The first real HumanEval tasks kept in the repository: canonical solutions pass, a wrong body fails."""
    tasks = load_questions("humaneval", benchmark_fixtures, ids=["HumanEval/0", "HumanEval/2", "HumanEval/23"])
    for task in tasks:
        assert grade(task, task.metadata["canonical_solution"]).correct, task.question_id
    assert not grade(tasks[0], "    return None\n").correct
