"""A total memory cap per sandbox (issue 32 item 3): a cgroup v2 ``memory.max`` where the host delegates a memory
controller (detected at start), else the documented rlimit bound of processes x address space + tmpfs.

Four children of 900 MB each used to coexist under ``memory_mb=1024``: the cap was per process only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sst_interp.sandbox import PythonSession, SandboxConfig
from sst_interp.sandbox import process as process_module
from sst_interp.sandbox.cgroup import CGROUP_VARIABLE, MIB, MemoryCap, detect, memory_cap
from sst_interp.sandbox.config import RLIMIT_BOUND_MIB


def _host(tmp_path: Path, own: str = "/a/b", controllers: str = "cpu memory pids", mounted: bool = True,
          subtree: dict[str, str] | None = None) -> Path:
    """A fake ``/proc/self`` and cgroup2 tree: ``subtree`` maps a group path to its ``cgroup.subtree_control``."""
    mount = tmp_path / "cgroup"
    proc = tmp_path / "proc"
    proc.mkdir(parents=True)
    fstype = "cgroup2 cgroup2 rw,nsdelegate" if mounted else "cgroup cgroup rw,memory"
    (proc / "mountinfo").write_text(f"24 30 0:22 / /proc rw - proc proc rw\n"
                                    f"36 25 0:31 / {mount} rw,relatime shared:9 - {fstype}\n")
    (proc / "cgroup").write_text(f"0::{own}\n" if mounted else "4:memory:/x\n")
    for group, control in (subtree or {"": "memory", "/a": "memory", "/a/b": ""}).items():
        directory = mount / group.lstrip("/")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "cgroup.subtree_control").write_text(control + "\n")
        (directory / "cgroup.procs").write_text("")
    (mount / "cgroup.controllers").write_text(controllers + "\n")
    return proc


def test_the_nearest_delegated_group_with_the_memory_controller_is_found(tmp_path):
    proc = _host(tmp_path)
    # the own group (/a/b, a leaf holding this process) cannot enable controllers for children; its parent has
    assert detect({}, proc) == MemoryCap(tmp_path / "cgroup" / "a")


def test_hosts_without_a_delegated_memory_controller_say_why(tmp_path):
    cases = {
        "v1": (dict(mounted=False), "no cgroup v2 mount"),
        "no-memory-controller": (dict(controllers="cpu pids"), "has no memory controller (cgroup v1 holds it)"),
        "not-enabled": (dict(subtree={"": "", "/a": "cpu", "/a/b": ""}),
                        "the memory controller is not enabled for the children of"),
    }
    for name, (host, reason) in cases.items():
        cap = detect({}, _host(tmp_path / name, **host))
        assert cap.parent is None and reason in cap.reason, (name, cap)


def test_the_variable_names_the_group_to_use(tmp_path):
    proc = _host(tmp_path)
    chosen = tmp_path / "cgroup"
    assert detect({CGROUP_VARIABLE: str(chosen)}, proc) == MemoryCap(chosen)
    cap = detect({CGROUP_VARIABLE: str(tmp_path / "nowhere")}, proc)
    assert cap.parent is None and cap.reason == f"${CGROUP_VARIABLE}: {tmp_path / 'nowhere'} is not a cgroup v2 directory"


def test_the_description_names_the_mechanism_and_the_cap(tmp_path):
    config = SandboxConfig()
    assert MemoryCap(tmp_path).describe(config) == (f"cgroup v2 memory.max of 1024 MiB for the whole sandbox (its "
                                                    f"processes and its tmpfs), in a group under {tmp_path}")
    assert MemoryCap(None, "no cgroup v2 mount").describe(config) == (
        "no cgroup (no cgroup v2 mount): bounded by rlimits only, 8 processes x 1024 MiB of address space + 64 MiB "
        "tmpfs = 8256 MiB")


def test_the_default_rlimit_bound_stays_under_the_stated_figure():
    """Without a cgroup: 8 processes x 1024 MiB + the 64 MiB tmpfs, under 8.1 GiB (it was 16 x 1024 + 64)."""
    config = SandboxConfig()
    assert config.rlimit_bound_mib == RLIMIT_BOUND_MIB == 8 * 1024 + 64 < 8.1 * 1024


BOUND_PROBE = r"""
import os, time
held = refused = 0
pids = []
for _ in range(6):
    try:
        pid = os.fork()
    except BlockingIOError:  # RLIMIT_NPROC
        refused += 1
        continue
    if pid == 0:
        block = b"x" * (150 << 20)  # written, so resident
        time.sleep(1.5)  # held while the others start
        os._exit(0)
    pids.append(pid)
held = sum(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0 for pid in pids)
try:
    block = b"x" * (300 << 20)
    big = "allowed"
except MemoryError:
    big = "MemoryError"
print(held, refused, big)
"""


def test_without_a_cgroup_the_bound_is_processes_times_address_space():
    """The rlimit bound's two factors, as the code meets them: 4 processes (supervisor and interpreter included)
    leave 2 children of 150 MiB each, the other 4 forks fail; 300 MiB in one process (limit 200) fail."""
    with PythonSession(SandboxConfig(memory_mb=200, max_processes=4, timeout_s=30)) as session:
        result = session.execute(BOUND_PROBE)
    assert result.status == "ok", result.stderr
    assert result.stdout.split() == ["2", "4", "MemoryError"]


def test_a_sandbox_starts_inside_its_group_and_the_group_goes_with_it(tmp_path, monkeypatch):
    """The mechanics on any host: with a (stand-in) parent group, the sandbox's outermost process writes itself into
    the group's ``cgroup.procs`` before it execs bwrap, ``memory.max`` is the sandbox's memory, and closing the
    sandbox removes the group (here a plain directory, which the kernel's rmdir would empty; so a warning)."""
    parent = tmp_path / "parent"
    parent.mkdir()
    session = PythonSession(SandboxConfig(memory_mb=300))  # its start-up check (one trial sandbox) runs first
    monkeypatch.setattr(process_module, "memory_cap", lambda: MemoryCap(parent))
    with pytest.warns(RuntimeWarning, match="not removed"):
        with session:
            assert session.execute("print(6 * 7)").stdout == "42\n"
            process = session._resources.process
            (group,) = parent.iterdir()
            assert process.cgroup is not None and process.cgroup.path == group
            assert (group / "memory.max").read_text() == str(300 * MIB)
            assert int((group / "cgroup.procs").read_text()) == process.popen.pid
    assert process.cgroup is None


TOTAL_PROBE = r"""
import json, os, time
pids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        block = b"x" * (150 << 20)  # written, so resident
        time.sleep(2)
        os._exit(0)
    pids.append(pid)
print(json.dumps([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]))
"""


@pytest.mark.skipif(not memory_cap().cgroup, reason=f"this host delegates no cgroup v2 memory controller "
                                                    f"({memory_cap().reason})")
def test_children_together_stay_within_the_sandbox_cap():
    """Four children of 150 MiB under a 256 MiB cap: the kernel kills some of them (SIGKILL, in the sandbox's
    group only) and the group's peak stays under the cap; with per-process rlimits alone all four lived."""
    with PythonSession(SandboxConfig(memory_mb=256, timeout_s=30)) as session:
        result = session.execute(TOTAL_PROBE)
        peak = session._resources.process.cgroup.peak_bytes()
    assert result.status == "ok", result.stderr
    codes = json.loads(result.stdout)
    assert codes.count(-9) >= 2 and set(codes) <= {0, -9}, codes
    assert peak is None or peak <= 256 * MIB
