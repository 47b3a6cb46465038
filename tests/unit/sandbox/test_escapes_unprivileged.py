"""The escape suite's socket cases as an ordinary user (issue 19, 1 and 9): run through ``setpriv`` as uid 65534
with a supplementary group, since such a caller's sandbox keeps its uid and groups. Skipped, with the reason,
where the machine cannot run them (not root, no ``setpriv``, no interpreter the unprivileged uid may run)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("bwrap")

USER = 65534
GROUP = 4242  # a supplementary group that only the test's user holds, like a docker group
REPO = Path(__file__).resolve().parents[3]

PROBE = r'''
import json, socket, sys
from sst_interp.data.code_exec import run_program
from sst_interp.sandbox import PythonSession, SandboxConfig
paths = json.loads(sys.argv[1])
outcome = {}
connect = "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({!r})\nprint('CONNECTED')\n"
with PythonSession(SandboxConfig()) as session:
    for path in paths:
        result = session.execute(connect.format(path))
        outcome["session " + path] = "CONNECTED" in result.stdout
for path in paths:
    outcome["program " + path] = run_program(connect.format(path)).passed
direct = {}
for path in paths:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        direct[path] = True
    except OSError:
        direct[path] = False
print(json.dumps({"sandboxed": outcome, "direct": direct}))
'''


def _system_python() -> str | None:
    """A Python 3 the unprivileged uid may execute, of the running one's minor version (the package and
    pyseccomp are put on its path)."""
    for candidate in (f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}", "/usr/bin/python3"):
        if os.path.exists(candidate):
            probe = subprocess.run(["setpriv", "--reuid", str(USER), "--regid", str(USER), "--clear-groups",
                                    candidate, "-c", "import sys; print(sys.version_info[:2])"],
                                   capture_output=True, text=True, check=False)
            if probe.returncode == 0 and probe.stdout.strip() == str(tuple(sys.version_info[:2])):
                return candidate
    return None


@pytest.fixture
def unprivileged_python() -> str:
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to an unprivileged uid (setpriv); the root case runs in test_escapes.py")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    closed = [str(d) for d in (REPO, *REPO.parents) if not d.stat().st_mode & 0o001]
    if closed:
        pytest.skip(f"uid {USER} cannot reach the checkout to import the package: {closed[0]} is closed to others "
                    "(clone into a world-traversable folder to run this test)")
    python = _system_python()
    if python is None:
        pytest.skip(f"no /usr/bin/python{sys.version_info.major}.{sys.version_info.minor} that uid {USER} may run "
                    f"(this interpreter lives under a directory closed to it)")
    return python


def test_an_ordinary_users_own_and_group_sockets_are_unreachable(unprivileged_python: str) -> None:
    """Issue 19, 1: as an ordinary user the sandbox reached that user's own sockets and a root:group 0660 one."""
    import pyseccomp

    directory = Path("/srv") / f"sst-unpriv-{uuid.uuid4().hex[:8]}"
    directory.mkdir(parents=True, mode=0o755)
    listeners = []
    try:
        paths = {"own": str(directory / "own.sock"), "group": str(directory / "group.sock")}
        for name, path in paths.items():
            listener = socket.socket(socket.AF_UNIX)
            listener.bind(path)
            listener.listen(4)
            listeners.append(listener)
        os.chown(paths["own"], USER, USER)
        os.chmod(paths["own"], 0o600)
        os.chown(paths["group"], 0, GROUP)
        os.chmod(paths["group"], 0o660)
        env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8",
               "PYTHONPATH": f"{REPO}:{os.path.dirname(pyseccomp.__file__)}"}
        run = subprocess.run(["setpriv", "--reuid", str(USER), "--regid", str(USER), "--groups", str(GROUP),
                              unprivileged_python, "-c", PROBE, json.dumps(list(paths.values()))],
                             capture_output=True, text=True, env=env, cwd="/", timeout=120, check=False)
        assert run.returncode == 0, run.stderr[-2000:]
        report = json.loads(run.stdout.strip().splitlines()[-1])
        assert all(report["direct"].values()), report  # outside the sandbox the user does reach both
        assert not any(report["sandboxed"].values()), report
    finally:
        for listener in listeners:
            listener.close()
        shutil.rmtree(directory, ignore_errors=True)
