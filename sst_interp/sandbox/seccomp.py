"""The sandbox's seccomp filter: system calls model code never needs are refused by the kernel.

Built with libseccomp (through the ``pyseccomp`` ctypes bindings) as two BPF programs. The main one is handed
to bwrap with ``--seccomp FD``; bwrap installs it before it runs the bootstrap. The mount and namespace calls are
left to a second, small one (:data:`MOUNT_SYSCALLS`, :data:`NAMESPACE_FLAGS`) that the bootstrap installs right
after it entered its own user namespace and mounted the working directory's tmpfs. Every process of the sandbox
(supervisor, interpreter, anything the code starts) runs under both, and none can remove them (filters are
inherited across ``fork`` and ``execve`` and can only be added to).

Refused with ``EPERM``: io_uring (``io_uring_setup``/``_enter``/``_register``: a large kernel attack
surface), keys (``keyctl``, ``add_key``, ``request_key``), ``bpf``, ``perf_event_open``, ``userfaultfd``,
``ptrace`` and cross-process memory access (``process_vm_readv``/``_writev``: the supervisor is out of the
code's reach), every mount call (``mount``, ``umount2``, ``pivot_root``, the new mount API), kernel module
and ``kexec`` calls, ``acct``, ``swapon``/``swapoff``, ``reboot``.

New namespaces are refused (``EPERM``), as Flatpak's filter does for untrusted apps: a nested user namespace
gives the code a root of its own in it and, with it, the kernel's namespaced-root attack surface (mounting
filesystems, netfilter, ...). ``unshare`` and ``clone`` fail when their flags hold any of ``CLONE_NEWUSER``,
``CLONE_NEWNS``, ``CLONE_NEWPID``, ``CLONE_NEWNET``, ``CLONE_NEWUTS``, ``CLONE_NEWIPC``, ``CLONE_NEWCGROUP`` (or
``CLONE_NEWTIME``), and ``setns`` fails always. The rule reads ``clone``'s first argument, which holds the flags
on x86-64 and arm64 (the escape suite runs on x86-64). ``clone3`` takes its flags in a struct in memory, which a
seccomp filter cannot read, so it fails with ``ENOSYS`` ("not implemented"): the C library then falls back to
``clone``, whose flags the filter sees; threads and child processes work as before.

``socket`` is refused (``EAFNOSUPPORT``) for every address family but ``AF_UNIX``, ``AF_INET`` and
``AF_INET6``: the interpreter uses those (``socketpair``, asyncio, a local server in test code), and the
network namespace leaves them only a loopback of their own; netlink, packet, vsock, bluetooth and the rest
are gone.
"""

from __future__ import annotations

import errno
import functools
import os
import socket

DENIED_SYSCALLS = (
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key",
    "bpf", "perf_event_open", "userfaultfd",
    "ptrace", "process_vm_readv", "process_vm_writev",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "acct", "swapon", "swapoff", "reboot",
)
MOUNT_SYSCALLS = ("mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount",
                  "open_tree")
#: The ``CLONE_NEW*`` flags (``linux/sched.h``): ``unshare`` or ``clone`` with any of them is refused.
NAMESPACE_FLAGS = {
    "CLONE_NEWTIME": 0x00000080, "CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000, "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000, "CLONE_NEWNET": 0x40000000,
}
ALLOWED_FAMILIES = (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6)
MAX_FAMILY = 64  # above every AF_* value the kernel knows (AF_MAX is 46 on Linux 6.x)


class SeccompUnavailable(RuntimeError):
    """libseccomp (or its Python bindings) could not be loaded."""


def _load_bindings():
    try:
        import pyseccomp
    except ImportError as err:
        raise SeccompUnavailable(f"the pyseccomp bindings are missing ({err}): pip install pyseccomp") from err
    except (OSError, RuntimeError) as err:  # the bindings raise one of these when libseccomp.so is missing
        raise SeccompUnavailable(f"libseccomp could not be loaded ({err}): apt-get install libseccomp2") from err
    return pyseccomp


def _denying(seccomp, names):  # noqa: ANN001, ANN202 - the pyseccomp module and its SyscallFilter
    """A filter that allows everything but ``names``, which fail with EPERM."""
    syscall_filter = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in names:
        syscall_filter.add_rule(seccomp.ERRNO(errno.EPERM), name)
    return syscall_filter


def _export(syscall_filter) -> bytes:
    with os.fdopen(os.memfd_create("sst-interp-seccomp-export", os.MFD_CLOEXEC), "w+b") as buffer:
        syscall_filter.export_bpf(buffer)
        buffer.seek(0)
        return buffer.read()


@functools.lru_cache(maxsize=1)
def filter_program() -> bytes:
    """The main filter's BPF program for this machine's architecture (built once per process)."""
    seccomp = _load_bindings()
    syscall_filter = _denying(seccomp, DENIED_SYSCALLS)
    for family in range(MAX_FAMILY):
        if family not in ALLOWED_FAMILIES:
            syscall_filter.add_rule(seccomp.ERRNO(errno.EAFNOSUPPORT), "socket", seccomp.Arg(0, seccomp.EQ, family))
    return _export(syscall_filter)


@functools.lru_cache(maxsize=1)
def mount_filter_program() -> bytes:
    """The filter the bootstrap installs after its own namespace and mount: every mount call refused, and every
    new namespace (``unshare``/``clone`` with a ``CLONE_NEW*`` flag, ``setns``; ``clone3`` fails with ``ENOSYS``)."""
    seccomp = _load_bindings()
    syscall_filter = _denying(seccomp, (*MOUNT_SYSCALLS, "setns"))
    for flag in NAMESPACE_FLAGS.values():
        # one rule per flag: the rules of one call are alternatives, so any flag set in the argument refuses it
        for name in ("unshare", "clone"):
            syscall_filter.add_rule(seccomp.ERRNO(errno.EPERM), name, seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    syscall_filter.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    return _export(syscall_filter)


def filter_fd() -> int:
    """A new file descriptor (a memfd, at offset 0) holding :func:`filter_program`, for ``bwrap --seccomp``."""
    fd = os.memfd_create("sst-interp-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, filter_program())
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd
