"""The bubblewrap command line for one sandbox: namespaces, mounts, environment, privileges.

Filesystem, in mount order (later mounts stack on earlier ones):

1. ``--ro-bind / /``: the whole host tree, read-only.
2. ``--proc /proc`` (a fresh procfs of the new PID namespace: the caller's processes, and their
   ``environ``, do not exist there) and ``--dev /dev`` (a minimal device tree).
3. ``/tmp``: a fresh, size-limited tmpfs (``tmp_mb``), writable, private to the sandbox.
4. Hidden paths, each covered by an empty read-only tmpfs: the caller's ``$HOME`` and working directory,
   ``/root``, ``/run`` (its unix sockets: ssh-agent, D-Bus, Docker are not network-namespaced), ``/var/tmp``,
   the host temporary directory (other sandboxes' directories), and ``SandboxConfig.hidden_paths``.
5. The interpreter's directories (:mod:`sst_interp.sandbox.interpreter`) re-bound read-only where a hidden
   path covered them, then hidden paths that lie inside those re-bound trees covered again.
6. The private working directory, bound read-write at its own host path: the only writable host path.
   It is ``HOME`` and ``TMPDIR``, and the bootstrap makes it the working directory.

Namespaces: ``--unshare-net`` (no network: only a loopback of its own), ``--unshare-pid`` (the sandbox's
processes see only each other; when its init dies the kernel kills every one of them), ``--unshare-ipc``,
``--unshare-uts``, ``--unshare-cgroup-try``; ``--new-session`` (no terminal to inject input into) and
``--die-with-parent`` (the sandbox dies with the thread that started it). ``--clearenv`` and then only
``PATH``, ``HOME``, ``TMPDIR``, ``LANG=C.UTF-8``, ``PYTHONHASHSEED=0``, ``PYTHONDONTWRITEBYTECODE=1``.

Privileges: an unprivileged caller gets bwrap's own user namespace (``--unshare-user``). A root caller runs
bwrap privileged with every capability dropped except ``CAP_SETUID``/``CAP_SETGID``, which the bootstrap
uses to become an unprivileged uid (see :mod:`sst_interp.sandbox.bootstrap`).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

from sst_interp.sandbox.config import SandboxConfig
from sst_interp.sandbox.interpreter import Interpreter, sandbox_env

MIB = 1024 * 1024
HIDING_TMPFS_BYTES = MIB  # holds only the mount points of re-bound directories
ALWAYS_HIDDEN = ("/root", "/run", "/var/tmp")
SANDBOX_UID = 65534  # "nobody": the uid a root caller's sandbox runs as
SANDBOX_GID = 65534
SIZE_OPTION_VERSION = (0, 7, 0)  # bwrap learned --size (tmpfs size limit) in 0.7.0


def find_bwrap() -> str | None:
    """Absolute path of ``bwrap`` on ``PATH``, or None."""
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=8)
def bwrap_version(bwrap: str) -> tuple[int, ...]:
    """The version of ``bwrap`` (e.g. ``(0, 8, 0)``); ``(0,)`` when it cannot be read."""
    try:
        output = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return (0,)  # the probe run that follows reports the real problem
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", output)
    return tuple(int(part) for part in match.groups(default="0")) if match else (0,)


def _inside(path: str, root: str) -> bool:
    """``path`` is ``root`` or lies below it."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def _outermost(paths: Sequence[str]) -> list[str]:
    """``paths`` without those that lie inside another one (sorted, unique)."""
    kept: list[str] = []
    for path in sorted(set(paths), key=lambda p: (p.count("/"), p)):
        if not any(_inside(path, other) for other in kept):
            kept.append(path)
    return kept


def _open_parents(path: str, covered: Sequence[str]) -> list[str]:
    """``--dir`` options (mode 0755) for the directories between the cover of ``path`` and ``path``.

    bwrap would create them itself, but privileged with mode 0700 and owned by root, which the sandbox's
    unprivileged uid could not pass through.
    """
    cover = max((c for c in covered if _inside(path, c)), key=len, default=None)
    if cover is None or cover == path:
        return []
    args: list[str] = []
    parent = os.path.dirname(path)
    parents = []
    while parent != cover and _inside(parent, cover):
        parents.append(parent)
        parent = os.path.dirname(parent)
    for directory in reversed(parents):
        args += ["--perms", "0755", "--dir", directory]
    return args


def paths_to_hide(config: SandboxConfig, workdir: str) -> list[str]:
    """Existing host paths the sandbox must not see, symlinks resolved, ``/`` left out."""
    try:
        cwd = os.getcwd()
    except FileNotFoundError:
        cwd = ""  # the caller's working directory was deleted: nothing left there to hide
    candidates = [os.environ.get("HOME", ""), cwd, *ALWAYS_HIDDEN, os.path.dirname(workdir),
                  tempfile.gettempdir(), *config.hidden_paths]
    hidden = []
    for path in candidates:
        if not path:
            continue
        real = os.path.realpath(path)
        # "/" cannot be hidden without hiding everything; a missing path has nothing to hide
        if real != "/" and os.path.exists(real) and real not in hidden:
            hidden.append(real)
    return hidden


def mount_args(config: SandboxConfig, interpreter: Interpreter, workdir: str, hidden: Sequence[str],
               size_option: bool) -> list[str]:
    """The mount part of the command line (module docstring, steps 1-6)."""
    def sized(size: int) -> list[str]:
        return ["--size", str(size)] if size_option else []

    args = ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    args += ["--perms", "1777", *sized(config.tmp_mb * MIB), "--tmpfs", "/tmp"]
    covers = _outermost([path for path in hidden if not _inside(path, "/tmp")])
    for path in covers:
        args += ["--perms", "0755", *sized(HIDING_TMPFS_BYTES), "--tmpfs", path]
    covered = [*covers, "/tmp"]
    rebound = _outermost([root for root in interpreter.roots if any(_inside(root, c) for c in covered)])
    for root in rebound:
        args += [*_open_parents(root, covered), "--ro-bind", root, root]
    for path in _outermost([p for p in hidden if any(_inside(p, r) and p != r for r in rebound)]):
        args += ["--perms", "0755", *sized(HIDING_TMPFS_BYTES), "--tmpfs", path]
    args += [*_open_parents(workdir, covered), "--bind", workdir, workdir]
    for path in covers:
        # read-only once the mount points inside exist; the bind mounts below keep their own flags
        args += ["--remount-ro", path]
    return args


def bwrap_argv(bwrap: str, config: SandboxConfig, interpreter: Interpreter, workdir: str, privileged: bool,
               command: Sequence[str]) -> list[str]:
    """The full ``bwrap`` command line that runs ``command`` in the sandbox of ``workdir``.

    Args:
        bwrap: path of the ``bwrap`` executable.
        config: limits and extra hidden paths.
        interpreter: the interpreter ``command`` uses; its directories stay visible.
        workdir: the private directory (host path; the same path inside).
        privileged: the caller is root (see the module docstring, "Privileges").
        command: the program to run inside.
    """
    args = [bwrap, "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", "sandbox", "--die-with-parent", "--new-session"]
    if privileged:
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user"]
    size_option = bwrap_version(bwrap) >= SIZE_OPTION_VERSION
    args += mount_args(config, interpreter, workdir, paths_to_hide(config, workdir), size_option)
    # start in "/": as root, bwrap would enter the working directory before the bootstrap switches to
    # its owner, without the right to (the bootstrap enters it)
    args += ["--chdir", "/", "--clearenv"]
    for name, value in sandbox_env(interpreter, workdir).items():
        args += ["--setenv", name, value]
    return [*args, "--", *command]
