"""The bubblewrap command line for one sandbox: namespaces, mounts, environment, privileges.

Filesystem: an allow list. bwrap starts from an empty root (a tmpfs of its own); only these appear in it:

1. ``/usr``, read-only, and the top-level ``/bin``, ``/sbin``, ``/lib*`` entries: re-created as the same
   symlinks where the host has symlinks (merged ``/usr``), bound read-only where they are directories.
2. A few read-only files of ``/etc`` that the C library and Python read (:data:`ETC_FILES`); a missing
   one is skipped.
3. The interpreter's own trees (:mod:`sst_interp.sandbox.interpreter`: its prefixes, e.g. a pyenv under
   ``/root/.pyenv``), read-only, with the directories leading to them created (mode 0755); paths of
   ``SandboxConfig.hidden_paths`` (and the caller's home and working directory) that lie inside those trees
   are covered again by an empty read-only tmpfs.
4. ``--proc /proc`` (a fresh procfs of the new PID namespace) and ``--dev /dev`` (a minimal device tree).
5. The working directory, :data:`SANDBOX_DIR`: only a mount point here. The bootstrap mounts a tmpfs of the
   sandbox's own on it, capped at ``tmp_mb`` MiB and ``max_inodes`` inodes, and makes it the working
   directory; it is ``HOME`` and ``TMPDIR``, and ``/tmp`` is a link to it. No host path is writable, and
   nothing the code writes reaches the host.

Nothing else of the host exists inside (``/srv``, ``/var``, ``/run``, ``/home``, ``/mnt``, ``/opt``, the
caller's tree). That matters for Unix-domain sockets: ``connect()`` on a socket file ignores read-only
mounts, so the only defence is that no host socket file is reachable at all; abstract sockets belong to the
network namespace, which is the sandbox's own.

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
from collections.abc import Sequence

from sst_interp.kernels.errors import UsageError
from sst_interp.sandbox.config import SandboxConfig
from sst_interp.sandbox.interpreter import Interpreter, sandbox_env

MIB = 1024 * 1024
HIDING_TMPFS_BYTES = MIB  # holds only the mount points of re-bound directories
TOP_LEVEL_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What the C library, the dynamic loader and Python's standard library read from /etc; nothing with secrets.
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/localtime", "/etc/passwd", "/etc/group",
             "/etc/nsswitch.conf", "/etc/hosts", "/etc/host.conf", "/etc/mime.types")
SANDBOX_DIR = "/sandbox"  # the working directory inside (a tmpfs the bootstrap mounts)
SANDBOX_UID = 65534  # "nobody": the uid a root caller's sandbox runs as
SANDBOX_GID = 65534
SIZE_OPTION_VERSION = (0, 7, 0)  # bwrap learned --size (tmpfs size limit) in 0.7.0


def find_bwrap() -> str | None:
    """Absolute path of ``bwrap`` on ``PATH``, or None."""
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=8)
def bwrap_version(bwrap: str) -> tuple[int, ...]:
    """The version of ``bwrap`` (e.g. ``(0, 8, 0)``); ``(0,)`` when it cannot be run or prints no version.

    Raises UsageError (one line) when it prints bytes that are not UTF-8: that is not bubblewrap, or a broken one,
    and guessing its options from it would start a sandbox we cannot vouch for."""
    try:
        output = subprocess.run([bwrap, "--version"], capture_output=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return (0,)  # the probe run that follows reports the real problem
    try:
        text = output.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UsageError(f"{bwrap} --version printed bytes that are not text ({err.reason} at byte {err.start} of "
                         f"{len(output)}): it is not a working bubblewrap; reinstall it (apt-get install --reinstall "
                         "bubblewrap) or put the real bwrap first on PATH") from err
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
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
    """Existing host paths that must stay hidden even inside an allowed tree, symlinks resolved, ``/`` left out.

    Only the interpreter's trees are bound from the host, so these matter only where they lie inside one
    (a run directory or the caller's home inside a pyenv prefix).
    """
    try:
        cwd = os.getcwd()
    except FileNotFoundError:
        cwd = ""  # the caller's working directory was deleted: nothing left there to hide
    hidden = []
    for path in (os.environ.get("HOME", ""), cwd, *config.hidden_paths):
        if not path:
            continue
        real = os.path.realpath(path)
        # "/" cannot be hidden without hiding everything; a missing path has nothing to hide
        if real != "/" and os.path.exists(real) and real not in hidden and not _inside(workdir, real):
            hidden.append(real)
    return hidden


def system_args() -> list[str]:
    """``/usr``, the top-level links into it and the allowed ``/etc`` files (module docstring, steps 1-2)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for path in TOP_LEVEL_LINKS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    # privileged bwrap would create /etc as root with mode 0700, closed to the sandbox's uid
    args += ["--perms", "0755", "--dir", "/etc"]
    for path in ETC_FILES:
        args += ["--ro-bind-try", path, path]
    return args


def mount_args(config: SandboxConfig, interpreter: Interpreter, workdir: str, hidden: Sequence[str],
               size_option: bool) -> list[str]:
    """The mount part of the command line (module docstring, steps 1-5)."""
    def sized(size: int) -> list[str]:
        return ["--size", str(size)] if size_option else []

    args = system_args()
    system = ["/usr", *TOP_LEVEL_LINKS]
    roots = _outermost([root for root in interpreter.roots if not any(_inside(root, s) for s in system)])
    for root in roots:
        args += [*_open_parents(root, ["/"]), "--ro-bind", root, root]
    for path in _outermost([p for p in hidden if any(_inside(p, r) for r in [*roots, "/usr"])]):
        args += ["--perms", "0755", *sized(HIDING_TMPFS_BYTES), "--tmpfs", path, "--remount-ro", path]
    args += ["--proc", "/proc", "--dev", "/dev"]
    # the working directory is only a mount point here: the bootstrap mounts the capped tmpfs on it, and /tmp
    # is a link to it, so the sandbox has one writable place with one size and one inode budget
    args += [*_open_parents(workdir, ["/"]), "--perms", "0755", "--dir", workdir, "--symlink", workdir, "/tmp"]
    return args


def bwrap_argv(bwrap: str, config: SandboxConfig, interpreter: Interpreter, workdir: str, privileged: bool,
               command: Sequence[str]) -> list[str]:
    """The full ``bwrap`` command line that runs ``command`` in the sandbox of ``workdir``.

    Args:
        bwrap: path of the ``bwrap`` executable.
        config: limits and extra hidden paths.
        interpreter: the interpreter ``command`` uses; its directories stay visible.
        workdir: the working directory inside (:data:`SANDBOX_DIR`).
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
