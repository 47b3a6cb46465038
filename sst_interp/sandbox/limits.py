"""The resource limits of a sandbox, as ``{RLIMIT_NAME: (soft, hard)}`` for the bootstrap to apply.

The limits are applied inside the sandbox by :mod:`sst_interp.sandbox.bootstrap`, in the child, before it
execs the interpreter that runs model code; soft and hard values are equal, so the code cannot raise them
(raising a hard limit needs ``CAP_SYS_RESOURCE`` in the initial user namespace, which the sandbox lacks).

Why each one:

- ``RLIMIT_CPU``: stops processes that outlive their block (e.g. a background busy loop); the wall-clock
  timeout handles the block itself.
- ``RLIMIT_AS``: a huge allocation fails with ``MemoryError`` instead of exhausting the machine.
- ``RLIMIT_NPROC``: bounds fork loops. The kernel ignores it for real uid 0 and for ``CAP_SYS_RESOURCE``,
  so the bwrap backend runs the code as an unprivileged uid in its own user namespace (package docstring).
- ``RLIMIT_FSIZE``: bounds each written file, including the captured stdout/stderr files.
- ``RLIMIT_CORE`` 0: a crash leaves no core file in the working directory.
"""

from __future__ import annotations

from sst_interp.sandbox.config import SandboxConfig

MIB = 1024 * 1024


def rlimits(config: SandboxConfig, *, process_limit: bool) -> dict[str, tuple[int, int]]:
    """The limits for ``config``; ``process_limit=False`` leaves out ``RLIMIT_NPROC`` (subprocess backend)."""
    table = {
        "RLIMIT_CPU": (config.cpu_seconds, config.cpu_seconds),
        "RLIMIT_AS": (config.memory_mb * MIB, config.memory_mb * MIB),
        "RLIMIT_FSIZE": (config.max_file_mb * MIB, config.max_file_mb * MIB),
        "RLIMIT_CORE": (0, 0),
    }
    if process_limit:
        table["RLIMIT_NPROC"] = (config.max_processes, config.max_processes)
    return table
