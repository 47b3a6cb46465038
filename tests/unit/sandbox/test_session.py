"""PythonSession behaviour: persistence, output capture, finish_session, tracebacks, restarts, backends."""

from __future__ import annotations

import pytest

from sst_interp.sandbox import CodeResult, PythonSession, SandboxConfig


@pytest.fixture
def session(bwrap: str):
    with PythonSession(SandboxConfig(timeout_s=5.0)) as running:
        yield running


def test_variables_functions_and_imports_persist(session: PythonSession) -> None:
    assert session.execute("import math\nx = 6 * 7\ndef double(v):\n    return 2 * v\n").status == "ok"
    result = session.execute("print(double(x), math.sqrt(16))")
    assert isinstance(result, CodeResult)
    assert (result.status, result.stdout, result.stderr) == ("ok", "84 4.0\n", "")
    assert result.seconds > 0


def test_stdout_and_stderr_are_captured_separately_per_block(session: PythonSession) -> None:
    result = session.execute("import sys\nprint('to out')\nprint('to err', file=sys.stderr)\nprint('more out')")
    assert result.stdout == "to out\nmore out\n"
    assert result.stderr == "to err\n"
    assert session.execute("pass").stdout == ""  # the previous block's output is not repeated


def test_subprocess_output_is_captured(session: PythonSession) -> None:
    code = "import os, subprocess\nos.system('echo hi')\nsubprocess.run(['sh', '-c', 'echo oops >&2'])"
    result = session.execute(code)
    assert result.stdout == "hi\n"
    assert result.stderr == "oops\n"


def test_finish_session_records_the_last_answer_and_the_block_goes_on(session: PythonSession) -> None:
    result = session.execute("r = finish_session('draft')\nfinish_session('The answer is 18.')\nprint(r)")
    assert result.finish_answer == "The answer is 18."
    assert result.stdout == "None\n"
    assert session.execute("finish_session(18)").finish_answer == "18"
    assert session.execute("y = 1").finish_answer is None


def test_exceptions_give_python_tracebacks_named_block(session: PythonSession) -> None:
    session.execute("def explode(v):\n    return v / 0\n")
    result = session.execute("a = 1\nexplode(a)\n")
    assert result.status == "error"
    assert result.stderr.startswith("Traceback (most recent call last):\n")
    assert 'File "<block>", line 2, in <module>' in result.stderr
    assert "explode(a)" in result.stderr
    assert 'File "<block>", line 2, in explode' in result.stderr
    assert "return v / 0" in result.stderr  # the line of the block that defined it
    assert "<string>" not in result.stderr and "driver" not in result.stderr
    assert result.stderr.rstrip().endswith("ZeroDivisionError: division by zero")
    syntax = session.execute("def broken(:\n")
    assert syntax.status == "error" and "SyntaxError" in syntax.stderr and "<block>" in syntax.stderr
    assert "Traceback" not in syntax.stderr


def test_output_is_capped_with_a_truncation_note(bwrap: str) -> None:
    with PythonSession(SandboxConfig(output_cap_chars=100)) as capped:
        result = capped.execute("import sys\nprint('a' * 250)\nsys.stderr.write('b' * 130)")
    assert result.stdout == "a" * 100 + "\n... [truncated 151 chars]"
    assert result.stderr == "b" * 100 + "\n... [truncated 30 chars]"


def test_non_utf8_output_is_replaced_not_fatal(session: PythonSession) -> None:
    result = session.execute("import sys\nsys.stdout.buffer.write(b'\\xff\\xfeok\\n')")
    assert result.status == "ok"
    assert result.stdout == "\ufffd\ufffdok\n"


def test_an_interpreter_that_dies_is_reported_and_replaced(session: PythonSession) -> None:
    session.execute("x = 5")
    died = session.execute("import os\nprint('bye', flush=True)\nos._exit(3)")
    assert died.status == "error"
    assert died.stdout == "bye\n"
    assert "interpreter died" in died.stderr and "status 3" in died.stderr
    after = session.execute("print('x' in globals())")
    assert after.stdout == "False\n"
    assert "lost" in after.stderr


def test_system_exit_is_an_error_not_the_end(session: PythonSession) -> None:
    session.execute("kept = 1")
    result = session.execute("raise SystemExit(4)")
    assert result.status == "error" and "SystemExit: 4" in result.stderr
    assert session.execute("print(kept)").stdout == "1\n"


def test_files_stay_in_the_private_directory_across_blocks(session: PythonSession) -> None:
    session.execute("open('notes.txt', 'w').write('kept')")
    result = session.execute("import os\nprint(open('notes.txt').read(), os.environ['HOME'] == os.getcwd())")
    assert result.stdout == "kept True\n"


def test_closed_session_refuses_work(bwrap: str) -> None:
    running = PythonSession(SandboxConfig())
    running.execute("pass")  # starts lazily
    running.close()
    running.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        running.execute("pass")


def test_subprocess_backend_keeps_a_persistent_namespace() -> None:
    with PythonSession(SandboxConfig(backend="subprocess", timeout_s=1.0)) as weak:
        weak.execute("x = 20")
        result = weak.execute("x += 1\nprint(x)\nfinish_session(x)")
        assert (result.status, result.stdout, result.finish_answer) == ("ok", "21\n", "21")
        looping = weak.execute("while True:\n    pass\n")
        # the supervisor's kill at the block's limit (the host's fallback, 3 s later, says "did not answer")
        assert looping.status == "timeout"
        assert "timed out after 1 s: the interpreter and every process it started were killed" in looping.stderr
        assert weak.execute("print(1)").stdout == "1\n"
