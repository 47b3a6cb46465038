"""A total memory cap per sandbox: a cgroup v2 group with ``memory.max``, where the host delegates one.

Rlimits are per process: ``RLIMIT_AS`` caps each process, so a sandbox whose code starts children can hold up to
``max_processes`` x ``memory_mb`` (plus its tmpfs). A cgroup caps the sum: every process of the sandbox, and the
tmpfs pages they write, count against one ``memory.max``; past it the kernel reclaims, then kills a process of that
group (not of the host).

:func:`memory_cap` detects once per process where such a group can be made: a cgroup v2 directory that this process
may write and whose ``cgroup.subtree_control`` enables the ``memory`` controller (so its children get
``memory.max``). Candidates, in order: ``$SST_INTERP_SANDBOX_CGROUP`` (a directory of the cgroup2 mount delegated
to this user, e.g. by systemd's ``Delegate=yes``), then this process's own cgroup and its ancestors. Where there is
none (cgroup v1, a cgroup v2 mount without the memory controller, or no delegation), the cap is the rlimits' bound
and :class:`MemoryCap` says so.

:class:`SandboxCgroup` is one sandbox's group: made before the sandbox starts, entered by a ``/bin/sh`` wrapper
that writes its own pid to ``cgroup.procs`` and then execs the sandbox (so everything the sandbox starts is in the
group from its first instruction; no ``preexec_fn`` runs in the forked child of a threaded caller), and removed
once the sandbox's processes are gone.
"""

from __future__ import annotations

import functools
import os
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

from sst_interp.sandbox.config import SandboxConfig

CGROUP_VARIABLE = "SST_INTERP_SANDBOX_CGROUP"
MIB = 1024 * 1024
#: Prefix of every sandbox group's directory name (``<prefix><pid>-<random>``).
GROUP_PREFIX = "sst-sandbox-"
EMPTY_TIMEOUT_S = 10.0  # the kernel empties a killed group in milliseconds; this only bounds a hang


@dataclass(frozen=True)
class MemoryCap:
    """How a sandbox's total memory is capped on this machine.

    Args:
        parent: the cgroup v2 directory sandbox groups are made in, or None (no delegated memory controller).
        reason: why there is none (for the description), or "" when there is one.
    """

    parent: Path | None
    reason: str = ""

    @property
    def cgroup(self) -> bool:
        """Whether sandboxes get a cgroup with ``memory.max``."""
        return self.parent is not None

    def describe(self, config: SandboxConfig) -> str:
        """How a sandbox of ``config`` has its total memory capped here, in words, with the cap."""
        if self.parent is not None:
            return (f"cgroup v2 memory.max of {config.memory_mb} MiB for the whole sandbox (its processes and its "
                    f"tmpfs), in a group under {self.parent}")
        if config.backend != "bwrap":
            return (f"no cgroup ({self.reason}) and no process limit under the subprocess backend: "
                    f"{config.memory_mb} MiB of address space per process, processes not bounded")
        return (f"no cgroup ({self.reason}): bounded by rlimits only, {config.max_processes} processes x "
                f"{config.memory_mb} MiB of address space + {config.tmp_mb} MiB tmpfs = {config.rlimit_bound_mib} "
                "MiB")


def _cgroup2_mount(mountinfo: str) -> str | None:
    """The mount point of the cgroup2 filesystem in ``/proc/self/mountinfo`` text, or None."""
    for line in mountinfo.splitlines():
        fields, sep, rest = line.partition(" - ")
        if sep and rest.split(" ", 1)[0] == "cgroup2":
            return fields.split(" ")[4]
    return None


def _own_cgroup(cgroup_text: str) -> str | None:
    """This process's cgroup v2 path (the ``0::PATH`` line of ``/proc/self/cgroup``), or None."""
    for line in cgroup_text.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def usable_parent(directory: Path) -> str | None:
    """None when sandbox groups with a memory limit can be made in ``directory``, else the reason they cannot."""
    control = directory / "cgroup.subtree_control"
    if not control.is_file():
        return f"{directory} is not a cgroup v2 directory"
    try:
        enabled = control.read_text().split()
    except OSError as err:
        return f"{control} cannot be read ({err.strerror})"
    if "memory" not in enabled:
        return f"the memory controller is not enabled for the children of {directory}"
    if not (os.access(directory, os.W_OK) and os.access(directory / "cgroup.procs", os.W_OK)):
        return f"{directory} is not delegated to this user (not writable)"
    return None


def detect(environ: dict[str, str] | None = None, proc: Path = Path("/proc/self")) -> MemoryCap:
    """Find where sandbox groups can be made (module docstring); ``proc`` is read for the mounts and this process's
    cgroup."""
    env = os.environ if environ is None else environ
    given = env.get(CGROUP_VARIABLE)
    if given:
        problem = usable_parent(Path(given))
        return MemoryCap(None, f"${CGROUP_VARIABLE}: {problem}") if problem else MemoryCap(Path(given))
    try:
        mount = _cgroup2_mount((proc / "mountinfo").read_text())
        own = _own_cgroup((proc / "cgroup").read_text())
        controllers = (Path(mount) / "cgroup.controllers").read_text().split() if mount and own else []
    except OSError as err:
        return MemoryCap(None, f"cannot read the cgroup v2 hierarchy ({err.filename}: {err.strerror})")
    if mount is None or own is None:
        return MemoryCap(None, "no cgroup v2 mount")
    if "memory" not in controllers:
        return MemoryCap(None, f"the cgroup v2 mount {mount} has no memory controller (cgroup v1 holds it)")
    directory = Path(mount) / own.lstrip("/")
    first_problem = None
    while True:
        problem = usable_parent(directory)
        if problem is None:
            return MemoryCap(directory)
        first_problem = first_problem or problem
        if directory == Path(mount):
            return MemoryCap(None, first_problem)
        directory = directory.parent


@functools.lru_cache(maxsize=1)
def memory_cap() -> MemoryCap:
    """:func:`detect` for this machine, once per process."""
    return detect()


class SandboxCgroup:
    """One sandbox's cgroup: ``memory.max`` of ``limit_mb`` MiB (and no swap, where swap is accounted)."""

    def __init__(self, parent: Path, limit_mb: int) -> None:
        self.path = parent / f"{GROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.path.mkdir()
        try:
            (self.path / "memory.max").write_text(str(limit_mb * MIB))
            swap = self.path / "memory.swap.max"
            if swap.exists():
                swap.write_text("0")  # swap would let the sandbox hold more than the cap
        except OSError:
            self.path.rmdir()
            raise

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started inside this group: a shell writes its own pid to ``cgroup.procs``, then execs it."""
        return ["/bin/sh", "-c", 'echo "$$" > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *argv]

    def peak_bytes(self) -> int | None:
        """The group's highest memory use so far (``memory.peak``; None where the kernel has no such file)."""
        peak = self.path / "memory.peak"
        return int(peak.read_text()) if peak.is_file() else None

    def remove(self) -> None:
        """Kill whatever still runs in the group (``cgroup.kill``: also children that left the subprocess backend's
        process group), wait until it is empty, and remove it. A failure is a warning, never an exception: the
        caller's run goes on, and an empty group holds no memory."""
        try:
            kill = self.path / "cgroup.kill"
            if kill.is_file():
                kill.write_text("1")
            events = self.path / "cgroup.events"
            deadline = time.monotonic() + EMPTY_TIMEOUT_S
            while events.is_file() and "populated 1" in events.read_text() and time.monotonic() < deadline:
                time.sleep(0.01)
            self.path.rmdir()
        except FileNotFoundError:
            pass  # already removed
        except OSError as err:
            warnings.warn(f"sandbox cgroup {self.path} not removed: {err.strerror}", RuntimeWarning, stacklevel=2)
