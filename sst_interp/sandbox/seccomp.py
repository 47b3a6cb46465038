"""The sandbox's seccomp filter: system calls model code never needs are refused by the kernel.

Built with libseccomp (through the ``pyseccomp`` ctypes bindings) as two BPF programs. The main one is handed
to bwrap with ``--seccomp FD``; bwrap installs it before it runs the bootstrap. The mount calls are left to a
second, small one (:data:`MOUNT_SYSCALLS`) that the bootstrap installs right after it mounted the working
directory's tmpfs. Every process of the sandbox (supervisor, interpreter, anything the code starts) runs under
both, and none can remove them (filters are inherited across ``fork`` and ``execve`` and can only be added to).

Refused with ``EPERM``: io_uring (``io_uring_setup``/``_enter``/``_register``: a large kernel attack
surface), keys (``keyctl``, ``add_key``, ``request_key``), ``bpf``, ``perf_event_open``, ``userfaultfd``,
``ptrace`` and cross-process memory access (``process_vm_readv``/``_writev``: the supervisor is out of the
code's reach), every mount call (``mount``, ``umount2``, ``pivot_root``, the new mount API), kernel module
and ``kexec`` calls, ``acct``, ``swapon``/``swapoff``, ``reboot``.

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
    """The filter the bootstrap installs after its mount: every mount call refused."""
    return _export(_denying(_load_bindings(), MOUNT_SYSCALLS))


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
