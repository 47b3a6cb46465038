"""Escapes the bwrap sandbox must contain; each test asserts the evidence on the host side."""

from __future__ import annotations

import json
import os
import socket
import uuid
from pathlib import Path

import pytest

from sst_interp.sandbox import PythonSession, SandboxConfig
from sst_interp.sandbox.interpreter import base_interpreter

pytestmark = pytest.mark.usefixtures("bwrap")


def _host_processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker`` (zombies have none, so they do not count)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue  # the process ended while we looked
        if marker.encode() in cmdline:
            found.append(int(entry))
    return found


def test_writes_and_deletes_outside_the_private_directory_do_not_reach_the_host(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    escape_in_tmp = tmp_path / "escape.txt"
    escape_in_cwd = Path.cwd() / f"sst_sandbox_escape_{uuid.uuid4().hex}.txt"
    code = (
        "import os, json\n"
        "outcome = {}\n"
        f"for name, action in [('tmp', lambda: open({str(escape_in_tmp)!r}, 'w').write('x')),\n"
        f"                     ('cwd', lambda: open({str(escape_in_cwd)!r}, 'w').write('x')),\n"
        f"                     ('delete', lambda: os.remove({str(victim)!r}))]:\n"
        "    try:\n"
        "        action()\n"
        "        outcome[name] = 'done'\n"
        "    except OSError as err:\n"
        "        outcome[name] = type(err).__name__\n"
        "open('inside.txt', 'w').write('private')\n"
        "print(json.dumps(outcome))\n"
    )
    try:
        with PythonSession(SandboxConfig()) as session:
            result = session.execute(code)
            assert result.status == "ok", result.stderr
            outcome = json.loads(result.stdout)
            # the host /tmp is replaced by the sandbox's own, so the tmp write lands there, not on the host
            assert outcome["cwd"] != "done" and outcome["delete"] != "done", outcome
        assert not escape_in_tmp.exists()
        assert not escape_in_cwd.exists()
        assert victim.read_text() == "keep me"
        assert not (Path.cwd() / "inside.txt").exists()
    finally:
        escape_in_cwd.unlink(missing_ok=True)


def test_no_connection_reaches_a_host_listener() -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    code = (
        "import socket, _socket, subprocess\n"
        "tries = {\n"
        f"    'socket': lambda: socket.create_connection(('127.0.0.1', {port}), timeout=2),\n"
        f"    '_socket': lambda: _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM).connect(('127.0.0.1', {port})),\n"
        "}\n"
        "for name, attempt in tries.items():\n"
        "    try:\n"
        "        attempt()\n"
        "        print(name, 'CONNECTED')\n"
        "    except OSError as err:\n"
        "        print(name, 'refused', err.errno)\n"
        f"bash = subprocess.run(['bash', '-c', 'echo x > /dev/tcp/127.0.0.1/{port}'], capture_output=True, timeout=5)\n"
        "print('bash', 'CONNECTED' if bash.returncode == 0 else 'refused')\n"
    )
    try:
        with PythonSession(SandboxConfig()) as session:
            result = session.execute(code)
        assert result.status == "ok", result.stderr
        assert "CONNECTED" not in result.stdout
        assert [line.split()[0] for line in result.stdout.splitlines()] == ["socket", "_socket", "bash"]
        listener.settimeout(0.3)
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()


def test_caller_environment_and_processes_are_invisible(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"sandbox-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("SST_SANDBOX_TEST_SECRET", secret)
    code = (
        "import os\n"
        "try:\n"
        f"    print('READ', open('/proc/{os.getpid()}/environ').read())\n"
        "except OSError as err:\n"
        "    print('unreadable', type(err).__name__)\n"
        "for pid in [entry for entry in os.listdir('/proc') if entry.isdigit()]:\n"
        "    try:\n"
        "        print(pid, open(f'/proc/{pid}/environ', 'rb').read().decode(errors='replace'))\n"
        "    except OSError as err:\n"
        "        print(pid, 'unreadable', type(err).__name__)\n"
        "print(sorted(os.environ), dict(os.environ))\n"
    )
    with PythonSession(SandboxConfig()) as session:
        result = session.execute(code)
    assert result.status == "ok", result.stderr
    assert result.stdout.startswith("unreadable")
    assert secret not in result.stdout + result.stderr
    assert "SST_SANDBOX_TEST_SECRET" not in result.stdout


def test_process_count_is_capped_even_for_root() -> None:
    code = (
        "import subprocess\n"
        "children = []\n"
        "for _ in range(50):\n"
        "    try:\n"
        "        children.append(subprocess.Popen(['sleep', '5']))\n"
        "    except OSError as err:\n"
        "        print('refused', err.errno)\n"
        "        break\n"
        "print('started', len(children))\n"
        "for child in children:\n"
        "    child.kill()\n"
        "    child.wait()\n"
    )
    limit = 8
    with PythonSession(SandboxConfig(max_processes=limit)) as session:
        result = session.execute(code)
        again = session.execute(code)  # the killed children were reaped, so the budget is back
    assert result.status == "ok", result.stderr
    started = int(result.stdout.split("started")[1])
    assert started < 50 and started <= limit
    assert "refused" in result.stdout
    assert int(again.stdout.split("started")[1]) == started


def test_memory_limit_raises_memory_error_and_the_session_survives() -> None:
    limit_mb = 256
    with PythonSession(SandboxConfig(memory_mb=limit_mb)) as session:
        session.execute("kept = 'still here'")
        result = session.execute(f"block = bytearray({2 * limit_mb} * 1024 * 1024)")
        after = session.execute("print(kept)")
    assert result.status == "error"
    assert "MemoryError" in result.stderr
    assert after.status == "ok" and after.stdout == "still here\n"


def test_infinite_loop_times_out_and_the_next_block_restarts() -> None:
    timeout = 1.5
    with PythonSession(SandboxConfig(timeout_s=timeout)) as session:
        session.execute("x = 1")
        result = session.execute("while True:\n    pass\n")
        after = session.execute("print('x' in globals())")
    assert result.status == "timeout"
    # the supervisor's kill at the block's limit (the host's fallback, 3 s later, says "did not answer")
    assert "timed out after 1.5 s: the interpreter and every process it started were killed" in result.stderr
    assert after.status == "ok" and after.stdout == "False\n"
    assert "variables" in after.stderr and "lost" in after.stderr


def test_detached_children_neither_block_nor_outlive_their_block() -> None:
    """Background processes (a setsid child, a double-forked orphan holding stdout) are gone when the block
    returns (issue 19: they used to keep running between turns). The limit is far above the block's own time: a
    block that waited for its children (which sleep 60 s) would end in a timeout, not ``ok``."""
    marker = f"sst-sandbox-marker-{uuid.uuid4().hex}"
    timeout = 30.0
    sleeper = "import sys, time; open(sys.argv[1], 'w').close(); print(1, flush=True); time.sleep(60)"
    code = (
        "import os, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {sleeper!r}, 'a', {marker!r}], start_new_session=True)\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', {sleeper!r}, 'b', {marker!r}])\n"
        "    os._exit(0)\n"
        "while not (os.path.exists('a') and os.path.exists('b')):\n"
        "    time.sleep(0.01)\n"
        "print('parent done')\n"
    )
    with PythonSession(SandboxConfig(timeout_s=timeout)) as session:
        result = session.execute(code)
        left_running = _host_processes_with(marker)
        after = session.execute("import os\nprint(sorted(os.listdir('.')))")
    assert result.status == "ok" and "parent done" in result.stdout, result.stderr
    assert left_running == []
    assert after.stdout == "['a', 'b']\n"  # both children really ran


def test_caller_home_and_working_directory_are_hidden() -> None:
    home = os.path.realpath(os.environ["HOME"])
    cwd = os.path.realpath(os.getcwd())
    marker = None
    if not os.listdir(home):
        marker = Path(home) / f".sst_sandbox_marker_{uuid.uuid4().hex}"  # evidence to look for
        marker.write_text("x")
    try:
        # A directory under a hidden ancestor (a checkout under /tmp) does not exist inside at all: seen as [].
        code = ("import json, os\n"
                "def entries(path):\n"
                "    return sorted(os.listdir(path)) if os.path.isdir(path) else []\n"
                f"print(json.dumps([entries({home!r}), entries({cwd!r})]))\n")
        with PythonSession(SandboxConfig()) as session:
            result = session.execute(code)
        assert result.status == "ok", result.stderr
        seen_home, seen_cwd = json.loads(result.stdout)
        for host_dir, seen in ((home, seen_home), (cwd, seen_cwd)):
            # only mount points on the way to the re-bound interpreter may show, never the caller's files
            allowed = {os.path.relpath(root, host_dir).split(os.sep)[0] for root in base_interpreter().roots
                       if root.startswith(host_dir.rstrip("/") + "/")}
            host_entries = set(os.listdir(host_dir))
            assert host_entries - allowed, f"{host_dir} has nothing of its own to hide"
            assert set(seen) <= allowed, (host_dir, seen)
    finally:
        if marker is not None:
            marker.unlink()
