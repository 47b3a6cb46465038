"""The escape suite (issue 19): each attack runs through the public API and the host checks containment.

Every test here failed before the sandbox was hardened; the docstring of each says which attack it is.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sst_interp.data.code_exec import run_program
from sst_interp.sandbox import PythonSession, SandboxConfig
from sst_interp.sandbox.interpreter import base_interpreter

pytestmark = pytest.mark.usefixtures("bwrap")

# host directories the old deny list left visible; a socket file in any of them answered from inside
SOCKET_PARENTS = ("/srv", "/opt", "/var/lib", "/mnt")


def _socket_dirs(tmp_path: Path) -> Iterator[Path]:
    """Fresh directories (removed afterwards) under each writable parent, and the test's tmp dir."""
    made = []
    for parent in SOCKET_PARENTS:
        directory = Path(parent) / f"sst-escape-{uuid.uuid4().hex[:8]}"
        try:
            directory.mkdir(parents=True)
        except OSError:
            continue  # not writable for this user: nothing of ours to plant there
        made.append(directory)
    return iter([*made, tmp_path])


@pytest.fixture
def host_sockets(tmp_path: Path) -> Iterator[list[tuple[str, socket.socket]]]:
    """Listening 0666 Unix sockets in several host directories: ``[(path, listener)]``."""
    listeners = []
    directories = list(_socket_dirs(tmp_path))
    try:
        for directory in directories:
            directory.chmod(0o755)
            path = str(directory / "daemon.sock")
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(path)
            os.chmod(path, 0o666)
            listener.listen(8)
            listener.setblocking(False)
            listeners.append((path, listener))
        yield listeners
    finally:
        for _, listener in listeners:
            listener.close()
        for directory in directories:
            if directory != tmp_path:
                shutil.rmtree(directory, ignore_errors=True)


def _accepted(listener: socket.socket) -> bool:
    """Whether anyone connected to ``listener``."""
    try:
        connection, _ = listener.accept()
    except BlockingIOError:
        return False
    connection.close()
    return True


def _connect_code(path: str) -> str:
    return ("import socket\n"
            "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
            f"s.connect({path!r})\n"
            "print('CONNECTED')\n")


def test_no_host_unix_socket_is_reachable_from_a_session(host_sockets) -> None:
    """Issue 19, 1: a 0666 socket under a path the deny list did not hide answered from PythonSession."""
    assert len(host_sockets) >= 2  # tmp_path and at least one directory outside /tmp
    with PythonSession(SandboxConfig()) as session:
        for path, listener in host_sockets:
            result = session.execute(_connect_code(path))
            assert "CONNECTED" not in result.stdout, path
            assert result.status == "error" and "FileNotFoundError" in result.stderr, (path, result.stderr)
            assert not _accepted(listener), path


def test_no_host_unix_socket_is_reachable_from_a_graded_program(host_sockets) -> None:
    """Issue 19, 1: the same through the HumanEval path (``run_program``), with the raw ``_socket`` module."""
    for path, listener in host_sockets:
        program = ("import _socket\n"
                   "s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)\n"
                   f"s.connect({path!r})\n")
        result = run_program(program)
        assert not result.passed, path
        assert "FileNotFoundError" in result.status, (path, result.status)
        assert not _accepted(listener), path


def test_only_the_allow_list_of_host_paths_is_visible() -> None:
    """Issue 19, build 1: nothing of /srv, /var, /run, /home, /mnt, /opt or the caller's tree exists inside."""
    cwd = os.path.realpath(os.getcwd())
    code = ("import os, json\n"
            f"print(json.dumps({{p: os.path.exists(p) for p in ['/srv', '/var', '/run', '/home', '/mnt', '/opt', "
            f"'/boot', '/media', {cwd!r}]}}))\n"
            "print(json.dumps(sorted(os.listdir('/'))))\n")
    with PythonSession(SandboxConfig()) as session:
        result = session.execute(code)
    assert result.status == "ok", result.stderr
    exists_line, root_line = result.stdout.splitlines()
    assert not any(json.loads(exists_line).values()), exists_line
    interpreter_tops = {root.strip("/").split("/")[0] for root in base_interpreter().roots}
    allowed = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "dev", "tmp"}
    assert set(json.loads(root_line)) <= allowed | interpreter_tops, root_line
