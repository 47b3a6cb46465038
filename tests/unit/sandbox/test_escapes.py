"""The escape suite (issue 19): each attack runs through the public API and the host checks containment.

Every test here failed before the sandbox was hardened; the docstring of each says which attack it is.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
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
    allowed = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "dev", "tmp", "sandbox"}
    assert set(json.loads(root_line)) <= allowed | interpreter_tops, root_line


# --- 2. the host survives anything the code does -------------------------------------------------------------

def test_a_replaced_json_dumps_does_not_crash_the_host() -> None:
    """Issue 19, 2: ``json.dumps`` returning 100,000-deep brackets made ``execute`` raise RecursionError."""
    with PythonSession(SandboxConfig()) as session:
        session.execute("kept = 3")
        bomb = session.execute("import json\njson.dumps = lambda *a, **k: '[' * 100000 + ']' * 100000\n"
                               "finish_session('done')")
        after = session.execute("print(kept)")
    assert (bomb.status, bomb.finish_answer) == ("ok", "done"), bomb.stderr
    assert (after.status, after.stdout) == ("ok", "3\n")


def test_a_reply_with_a_huge_integer_is_an_error_not_a_crash() -> None:
    """Issue 19, 2: a reply holding a 5,000-digit integer made the host raise ValueError."""
    code = ("import json, os, struct\n"
            "body = ('{\"status\": \"ok\", \"finish_answer\": null, \"n\": ' + '9' * 5000 + '}').encode()\n"
            "for fd in range(3, 64):\n"
            "    try:\n"
            "        os.write(fd, struct.pack('>I', len(body)) + body)\n"
            "    except OSError:\n"
            "        pass\n")
    with PythonSession(SandboxConfig()) as session:
        result = session.execute(code)
        after = session.execute("print('alive')")
    assert result.status == "error" and "[sandbox]" in result.stderr, result
    assert after.stdout == "alive\n"


def test_a_lone_surrogate_answer_is_made_storable() -> None:
    """Issue 19, 2: ``finish_session('\\ud800')`` was accepted and the episodes writer raised UnicodeEncodeError."""
    with PythonSession(SandboxConfig()) as session:
        result = session.execute("finish_session('a\\ud800b')")
    assert result.status == "ok" and result.finish_answer is not None
    result.finish_answer.encode("utf-8")  # raises if a surrogate got through
    assert result.finish_answer.startswith("a") and result.finish_answer.endswith("b")


# four children in sessions of their own, each creating files in 50 directories as fast as it can
SPAM_CHILD = ("import os, itertools\n"
              "for i in itertools.count():\n"
              "    try:\n"
              "        os.makedirs(f'd{os.getpid()}/{i % 50}', exist_ok=True)\n"
              "        open(f'd{os.getpid()}/{i % 50}/f{i}', 'w').close()\n"
              "    except OSError:\n"
              "        pass\n")
FILE_SPAMMER = ("import subprocess, sys\n"
                "for _ in range(4):\n"
                f"    subprocess.Popen([sys.executable, '-c', {SPAM_CHILD!r}, MARKER], start_new_session=True)\n")


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary directory of this test's own for the sandbox's host directories (other runs share /tmp)."""
    import tempfile

    directory = tmp_path / "host-tmp"
    directory.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    return directory


def test_close_during_a_block_kills_everything_before_removing_the_work_dir(private_tmp: Path) -> None:
    """Issue 19, 2: children creating files while the work dir was removed made close() raise ENOTEMPTY,
    left work dirs behind, and sandbox processes outlived close()."""
    import threading

    for attempt in range(8):  # the old race lost 2-10 of 15 runs: eight tries make it show
        marker = f"sst-spam-{uuid.uuid4().hex}"
        session = PythonSession(SandboxConfig(timeout_s=20))
        session.start()
        outcome: list[object] = []
        code = FILE_SPAMMER.replace("MARKER", repr(marker)) + "import time\ntime.sleep(15)\n"
        worker = threading.Thread(target=lambda: outcome.append(session.execute(code)))
        worker.start()
        deadline = time.monotonic() + 10
        while len(_host_processes_with(marker)) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # let them write
        session.close()
        assert _host_processes_with(marker) == [], attempt
        worker.join(timeout=60)  # close() ends the block at once; this only gives up on a hang
        assert not worker.is_alive() and outcome and outcome[0].status != "ok", outcome
    assert os.listdir(private_tmp) == []


def test_run_program_with_file_spamming_children_neither_raises_nor_leaves_a_dir(private_tmp: Path) -> None:
    """Issue 19, 2: the same through ``run_program``."""
    for _ in range(8):  # the old race lost 2-10 of 15 runs: eight tries make it show
        marker = f"sst-spam-{uuid.uuid4().hex}"
        program = FILE_SPAMMER.replace("MARKER", repr(marker)) + "import time\ntime.sleep(0.2)\nassert False\n"
        result = run_program(program)
        assert not result.passed
        assert _host_processes_with(marker) == []
    assert os.listdir(private_tmp) == []


def _host_processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker`` (zombies have none)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue  # it ended while we looked
    return found


# --- 3. passing means the test ran to its end ----------------------------------------------------------------

PROMPT = 'def add_one(x: int) -> int:\n    """Return x plus one."""\n'
CHECK = "def check(candidate):\n    assert candidate(1) == 2\n\ncheck(add_one)\n"
# a wrong body, then a way to make the process end with status 0 anyway
EXIT_ZERO_TRICKS = {
    "os._exit": "    return x\nimport os\nos._exit(0)\n",
    "sys.exit": "    return x\nimport sys\nsys.exit(0)\n",
    "atexit": "    return x\nimport atexit, os\natexit.register(lambda: os._exit(0))\n",
    "excepthook": "    return x\nimport os, sys\nsys.excepthook = lambda *exc: os._exit(0)\n",
}


@pytest.mark.parametrize("trick", sorted(EXIT_ZERO_TRICKS))
def test_a_wrong_answer_that_exits_zero_fails(trick: str) -> None:
    """Issue 19, 3: a wrong completion followed by os._exit(0), sys.exit(0), an atexit hook or a replaced
    excepthook was graded passed=True."""
    from sst_interp.codeact.grading import grade_episode
    from sst_interp.data.grading import grade_humaneval
    from sst_interp.data.question import Question

    question = Question("t", "humaneval", PROMPT, CHECK, [], {"task_prompt": PROMPT})
    completion = EXIT_ZERO_TRICKS[trick]
    assert not grade_humaneval(question, completion).correct
    episode = _Episode([_Turn(code=PROMPT + completion, tool_status="ok")])
    assert not grade_episode(question, episode).correct
    assert grade_humaneval(question, "    return x + 1\n").correct  # the honest answer still passes


def test_an_accidental_sys_exit_before_the_check_fails() -> None:
    """Issue 19, 3: code that calls sys.exit() by accident passed the same way."""
    result = run_program("import sys\nsys.exit()\nassert False\n")
    assert not result.passed and "SystemExit" in result.status


class _Turn:
    def __init__(self, code: str, tool_status: str) -> None:
        self.code, self.tool_status = code, tool_status


class _Episode:
    def __init__(self, turns: list[_Turn]) -> None:
        self.turns, self.final_answer = turns, ""


# --- 4. replies out of the model code's reach -----------------------------------------------------------------

FORGE = ("import json, os, struct\n"
         "def forge(status='ok', answer='FORGED', nonce=None):\n"
         "    fields = {'status': status, 'finish_answer': answer}\n"
         "    if nonce is not None:\n"
         "        fields['nonce'] = nonce\n"
         "    body = json.dumps(fields).encode()\n"
         "    frame = struct.pack('>I', len(body)) + body\n"
         "    targets = [f'/proc/self/fd/{fd}' for fd in os.listdir('/proc/self/fd')]\n"
         "    targets += [f'/proc/{p}/fd/{fd}' for p in os.listdir('/proc') if p.isdigit() and p != str(os.getpid())\n"
         "                for fd in (os.listdir(f'/proc/{p}/fd') if os.access(f'/proc/{p}/fd', os.R_OK) else [])]\n"
         "    for path in targets:\n"
         "        try:\n"
         "            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)\n"
         "            os.write(fd, frame)\n"
         "            os.close(fd)\n"
         "        except OSError:\n"
         "            pass\n"
         "    for fd in range(3, 256):\n"
         "        try:\n"
         "            os.write(fd, frame)\n"
         "        except OSError:\n"
         "            pass\n")


def test_a_forged_ok_never_hides_an_exception() -> None:
    """Issue 19, 5: a block that raised came back ``ok`` after writing a frame of its own."""
    with PythonSession(SandboxConfig()) as session:
        result = session.execute(FORGE + "forge()\nforge(nonce='ready')\nraise ValueError('real failure')\n")
    assert result.status == "error"
    assert result.finish_answer is None


def test_forged_replies_do_not_fall_out_of_step() -> None:
    """Issue 19, 5: a forged frame made the next block receive this block's reply."""
    with PythonSession(SandboxConfig()) as session:
        first = session.execute(FORGE + "forge(answer='meant for the next block')\nfinish_session('first')\n")
        second = session.execute("print('second ran')")
        third = session.execute("finish_session('third')")
    assert first.finish_answer != "meant for the next block"
    assert (second.status, second.stdout, second.finish_answer) == ("ok", "second ran\n", None)
    assert third.finish_answer == "third"


def test_a_forged_ok_then_a_spin_neither_returns_ok_nor_keeps_burning_cpu() -> None:
    """Issue 19, 5: a forged ``ok`` followed by a spin returned in 0.00 s and kept burning CPU."""
    marker = f"sst-spin-{uuid.uuid4().hex}"
    with PythonSession(SandboxConfig(timeout_s=3)) as session:
        result = session.execute(FORGE + f"import sys\nsys.argv.append({marker!r})\nforge()\n"
                                 "import subprocess\n"
                                 f"subprocess.Popen([sys.executable, '-c', 'while True: pass', {marker!r}])\n"
                                 "while True:\n    pass\n")
        spinning = _host_processes_with(marker)
        after = session.execute("print('fresh')")
    assert result.status != "ok"
    assert spinning == []
    assert after.stdout == "fresh\n"


# --- 7. a sandbox that fails is an error, never a graded answer --------------------------------------------

def test_run_program_raises_when_bwrap_fails_after_the_start_up_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19, bug 2: ``run_program`` returned ``failed: bwrap: ...``, so the answer was graded wrong."""
    from sst_interp.data.grading import grade_humaneval
    from sst_interp.data.question import Question
    from sst_interp.sandbox import SandboxError, check_backend
    from sst_interp.sandbox import process as process_module

    check_backend(SandboxConfig())  # the start-up check passes and is cached
    real_argv = process_module.bwrap_argv

    def broken_argv(*args, **kwargs):
        argv = real_argv(*args, **kwargs)
        return [argv[0], "--no-such-bwrap-option", *argv[1:]]

    monkeypatch.setattr(process_module, "bwrap_argv", broken_argv)
    with pytest.raises(SandboxError, match="did not start"):
        run_program("pass\n")
    question = Question("t", "humaneval", PROMPT, CHECK, [], {})
    with pytest.raises(SandboxError):
        grade_humaneval(question, "    return x + 1\n")


# --- 6. system calls: a seccomp filter ------------------------------------------------------------------------

SYSCALL_PROBE = r'''
import ctypes, errno, json, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def attempt(number, *args):
    result = libc.syscall(number, *[ctypes.c_long(a) for a in args])
    return "allowed" if result >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
params = (ctypes.c_char * 120)()
outcome = {
    "io_uring_setup": attempt(425, 8, ctypes.addressof(params)),
    "keyctl": attempt(250, 0, -3, 0),          # KEYCTL_GET_KEYRING_ID of the session keyring
    "bpf": attempt(321, 0, 0, 0),
    "perf_event_open": attempt(298, 0, 0, -1, -1, 0),
    "userfaultfd": attempt(323, 0),
    "ptrace": attempt(101, 16, 1, 0, 0),       # PTRACE_ATTACH to pid 1
    "mount": attempt(165, 0, 0, 0, 0, 0),
}
for family in ("AF_NETLINK", "AF_PACKET"):
    try:
        socket.socket(getattr(socket, family), socket.SOCK_RAW).close()
        outcome[family] = "allowed"
    except OSError as err:
        outcome[family] = errno.errorcode[err.errno]
for family in ("AF_UNIX", "AF_INET"):
    socket.socket(getattr(socket, family), socket.SOCK_STREAM).close()
print(json.dumps(outcome))
'''


def test_the_seccomp_filter_refuses_what_model_code_never_needs() -> None:
    """Issue 19, 6: there was no seccomp filter (``io_uring_setup`` succeeded)."""
    with PythonSession(SandboxConfig()) as session:
        result = session.execute(SYSCALL_PROBE)
    assert result.status == "ok", result.stderr
    outcome = json.loads(result.stdout)
    assert {name: outcome[name] for name in ("io_uring_setup", "keyctl", "bpf", "perf_event_open", "userfaultfd",
                                             "ptrace", "mount")} == dict.fromkeys(
        ("io_uring_setup", "keyctl", "bpf", "perf_event_open", "userfaultfd", "ptrace", "mount"), "EPERM")
    assert outcome["AF_NETLINK"] == outcome["AF_PACKET"] == "EAFNOSUPPORT"


# --- issue 32, 2: no nested namespaces ---------------------------------------------------------------------------

NAMESPACE_PROBE = r"""
import ctypes, errno, json, os, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
FLAGS = {"NEWUSER": 0x10000000, "NEWNS": 0x00020000, "NEWPID": 0x20000000, "NEWNET": 0x40000000,
         "NEWUTS": 0x04000000, "NEWIPC": 0x08000000, "NEWCGROUP": 0x02000000}
SIGCHLD = 17

def in_child(call):
    # each attempt in a child of its own: one that succeeds must not change the probe's namespaces
    pid = os.fork()
    if pid == 0:
        result = call()
        os._exit(0 if result >= 0 else min(ctypes.get_errno(), 255) or 255)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return "allowed" if code == 0 else errno.errorcode.get(code, str(code))

def raw_clone(flags):
    pid = libc.syscall(56, ctypes.c_long(flags | SIGCHLD), 0, 0, 0, 0)  # clone without a stack: like fork
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
    return pid

def raw_clone3(flags):
    args = ctypes.create_string_buffer(struct.pack("8Q", flags, 0, 0, 0, SIGCHLD, 0, 0, 0))
    pid = libc.syscall(435, ctypes.c_void_p(ctypes.addressof(args)), ctypes.c_long(64))
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
    return pid

outcome = {"setns": in_child(lambda: libc.setns(os.open("/proc/self/ns/uts", os.O_RDONLY), 0)),
           "clone3 plain": in_child(lambda: raw_clone3(0))}
for name, flag in FLAGS.items():
    # with NEWUSER: a new user namespace grants the rights the other namespaces need, so only a filter stops these
    both = flag | FLAGS["NEWUSER"]
    outcome[f"unshare {name}"] = in_child(lambda: libc.unshare(both))
    outcome[f"clone {name}"] = in_child(lambda: raw_clone(both))
    outcome[f"clone3 {name}"] = in_child(lambda: raw_clone3(both))
print(json.dumps(outcome))
"""

ORDINARY_CHILDREN = r"""
import os, subprocess, sys, threading
results = []
threads = [threading.Thread(target=lambda i=i: results.append(i * i)) for i in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
child = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True, check=True)
pid = os.fork()
if pid == 0:
    os._exit(3)
forked = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
spawned = os.posix_spawn("/bin/sh", ["sh", "-c", "exit 5"], {})
print(sorted(results), child.stdout.strip(), forked, os.waitstatus_to_exitcode(os.waitpid(spawned, 0)[1]))
"""


def test_no_nested_namespace_can_be_created() -> None:
    """Issue 32, 2: code inside the sandbox could ``unshare`` a nested user namespace (and with it every other
    kind); ``unshare``/``clone`` with a namespace flag now fail with EPERM, ``setns`` too, and ``clone3``, whose
    flags a filter cannot read, with ENOSYS."""
    with PythonSession(SandboxConfig()) as session:
        result = session.execute(NAMESPACE_PROBE)
    assert result.status == "ok", result.stderr
    outcome = json.loads(result.stdout)
    kinds = ("NEWUSER", "NEWNS", "NEWPID", "NEWNET", "NEWUTS", "NEWIPC", "NEWCGROUP")
    expected = {f"{call} {kind}": "EPERM" for call in ("unshare", "clone") for kind in kinds}
    expected.update({f"clone3 {kind}": "ENOSYS" for kind in kinds}, setns="EPERM")
    expected["clone3 plain"] = "ENOSYS"
    assert outcome == expected


def test_threads_and_child_processes_work_without_clone3() -> None:
    """Issue 32, 2: with ``clone3`` refused, the C library falls back to ``clone`` for threads, ``fork``,
    ``subprocess`` (vfork) and ``posix_spawn``: ordinary code that starts them runs as before."""
    with PythonSession(SandboxConfig()) as session:
        result = session.execute(ORDINARY_CHILDREN)
    assert result.status == "ok", result.stderr
    assert result.stdout == "[0, 1, 4, 9] 42 3 5\n"


# --- 6. limits per sandbox: the writable place is a capped tmpfs ----------------------------------------------

def test_disk_use_and_file_count_are_capped_per_sandbox() -> None:
    """Issue 19, 6: the writable dir was a host directory; 1 GiB and 64k inodes were written there in 3 s."""
    code = ("import os\n"
            "written = files = 0\n"
            "try:\n"
            "    for i in range(64):\n"
            "        with open(f'big{i}', 'wb') as handle:\n"
            "            handle.write(b'x' * (1 << 20))\n"
            "        written += 1\n"
            "except OSError as err:\n"
            "    print('disk', err.errno)\n"
            "for name in os.listdir('.'):\n"
            "    os.remove(name)\n"
            "try:\n"
            "    for i in range(5000):\n"
            "        open(f'/tmp/f{i}', 'w').close()\n"  # /tmp counts against the same budget
            "        files += 1\n"
            "except OSError as err:\n"
            "    print('inodes', err.errno)\n"
            "print(written, files)\n")
    with PythonSession(SandboxConfig(tmp_mb=8, max_inodes=1000)) as session:
        result = session.execute(code)
    assert result.status == "ok", result.stderr
    lines = result.stdout.split()
    written, files = int(lines[-2]), int(lines[-1])
    assert "disk" in result.stdout and "inodes" in result.stdout, result.stdout
    assert written <= 8 and files < 1000  # 8 MiB and 1,000 inodes, not the 64 MiB and 5,000 tried


def test_files_survive_an_interpreter_restart_but_never_reach_the_host(private_tmp: Path) -> None:
    """The tmpfs lives as long as the sandbox: a dead interpreter's files are still there for the next block."""
    with PythonSession(SandboxConfig()) as session:
        session.execute("open('notes.txt', 'w').write('kept')")
        session.execute("import os\nos._exit(1)")
        after = session.execute("print(open('notes.txt').read())")
        on_host = [str(path) for path in private_tmp.rglob("notes.txt")]
    assert after.stdout == "kept\n" and "files in the working directory are kept" in after.stderr
    assert on_host == []


def test_closing_the_reply_pipe_is_an_error_not_a_hang() -> None:
    """Code that closes every descriptor it holds (the reply pipe among them) must not hang the supervisor: the
    block is an ``error`` (the closed pipe), not a ``timeout`` (waited out to the block's limit)."""
    with PythonSession(SandboxConfig(timeout_s=30)) as session:
        result = session.execute("import os\nos.closerange(3, 1024)\nimport time\ntime.sleep(60)\n")
        after = session.execute("print('fresh')")
    assert result.status == "error", result
    assert "[sandbox] the Python interpreter died (it closed its reply pipe and was killed)" in result.stderr, result
    assert after.stdout == "fresh\n"
