"""What a sandbox may do: :class:`SandboxConfig` (backend, time, memory, processes, files, output).

The config is plain data; :meth:`SandboxConfig.validate` checks its own fields, and
:func:`sst_interp.sandbox.check.check_backend` also checks that the chosen backend can run here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from sst_interp.kernels.errors import UsageError

BACKENDS: tuple[str, ...] = ("bwrap", "subprocess")
"""``bwrap``: bubblewrap namespaces, the isolating default. ``subprocess``: a plain child process, NOT a
security boundary (no network, PID or filesystem isolation); only used when asked for explicitly."""


#: The memory one sandbox can hold with the default limits where no cgroup caps it: 8 processes x 1024 MiB of
#: address space + the 64 MiB tmpfs (:attr:`SandboxConfig.rlimit_bound_mib`).
RLIMIT_BOUND_MIB = 8 * 1024 + 64


@dataclass(frozen=True)
class SandboxConfig:
    """Limits and isolation for model-written Python code.

    Args:
        backend: ``bwrap`` (default; see :mod:`sst_interp.sandbox.bwrap`) or ``subprocess`` (weak, unsafe for
            untrusted code).
        timeout_s: wall-clock seconds one ``execute`` (or one one-shot program) may run; then every process of
            the sandbox is killed.
        cpu_seconds: CPU seconds each process may use (``RLIMIT_CPU``). The persistent interpreter is one
            process, so for a session this is the CPU budget of one interpreter's whole life; when it is spent
            the kernel kills it and the next ``execute`` starts a fresh one. Higher than ``timeout_s`` so that
            the wall clock, not this, ends single runaway blocks.
        memory_mb: address space per process in MiB (``RLIMIT_AS``); past it allocations raise ``MemoryError``.
            Where the host delegates a cgroup v2 memory controller, also the memory of the whole sandbox (its
            processes and its tmpfs; :mod:`~sst_interp.sandbox.cgroup`); elsewhere the sandbox's memory is bounded
            by ``max_processes`` x ``memory_mb`` + ``tmp_mb`` (:data:`RLIMIT_BOUND_MIB` with the defaults).
        max_processes: processes (and threads) the sandbox may hold at once, the interpreter included
            (``RLIMIT_NPROC``, counted in the sandbox's own user namespace; see the package docstring).
            The ``subprocess`` backend does not set it (without a user namespace it would count every
            process of the caller's user). 8 by default, so that the memory bound without a cgroup stays at
            8 GiB plus the tmpfs.
        max_file_mb: largest file a process may write, in MiB (``RLIMIT_FSIZE``); also bounds captured output.
        tmp_mb: size in MiB of the sandbox's one writable place (bwrap backend): a memory-backed tmpfs that is
            the working directory, ``HOME``, ``TMPDIR`` and ``/tmp``. It lives as long as the sandbox.
        max_inodes: files and directories that tmpfs may hold (bwrap backend).
        output_cap_chars: characters of stdout and of stderr (each) returned per execute; the rest is cut and
            marked ``... [truncated N chars]``.
        hidden_paths: extra host paths to hide (e.g. the run directory); the caller's ``$HOME``, working
            directory, ``/root``, ``/run``, ``/var/tmp`` and the temporary directory are always hidden.
    """

    backend: str = "bwrap"
    timeout_s: float = 10.0
    cpu_seconds: int = 60
    memory_mb: int = 1024
    max_processes: int = 8
    max_file_mb: int = 16
    tmp_mb: int = 64
    max_inodes: int = 16384
    output_cap_chars: int = 2000
    hidden_paths: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        # Callers pass lists or Paths; keep the frozen config hashable and its paths plain absolute strings.
        paths = tuple(os.path.abspath(os.fspath(path)) for path in self.hidden_paths)
        object.__setattr__(self, "hidden_paths", paths)

    @property
    def rlimit_bound_mib(self) -> int:
        """The most memory this sandbox can hold where no cgroup caps it: each process's address space
        (``RLIMIT_AS``) times the processes it may have (``RLIMIT_NPROC``), plus the tmpfs, in MiB."""
        return self.max_processes * self.memory_mb + self.tmp_mb

    def validate(self) -> None:
        """Raise :class:`~sst_interp.kernels.errors.UsageError` (one line) if a field is out of range."""
        if self.backend not in BACKENDS:
            raise UsageError(f"unknown sandbox backend {self.backend!r}: choose one of {', '.join(BACKENDS)}")
        if not self.timeout_s > 0:
            raise UsageError(f"sandbox timeout_s must be > 0, got {self.timeout_s}")
        for name in ("cpu_seconds", "memory_mb", "max_processes", "max_file_mb", "tmp_mb", "max_inodes",
                     "output_cap_chars"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise UsageError(f"sandbox {name} must be a positive integer, got {value!r}")
        if self.max_processes < 3:
            # the supervisor and the interpreter are two processes; fewer than 3 would forbid every subprocess
            raise UsageError(f"sandbox max_processes must be >= 3, got {self.max_processes}")
