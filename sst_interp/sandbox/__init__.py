"""Sandboxed execution of model-written Python: CodeACT sessions and one-shot programs (HumanEval).

Public API:

- :class:`SandboxConfig` (``config.py``): backend and limits; :func:`check_backend` says, as one-line
  :class:`~sst_interp.kernels.errors.UsageError` s, whether it can run here.
- :class:`PythonSession` (``session.py``): one persistent interpreter per episode; ``execute(code)`` returns
  a :class:`CodeResult` (``stdout``, ``stderr``, ``status``, ``finish_answer``, ``seconds``).
- :func:`run_program` (``oneshot.py``): one program, pass/fail, as an :class:`ExecutionResult`.

Backends. ``bwrap`` (default, Linux): bubblewrap namespaces; see :mod:`~sst_interp.sandbox.bwrap` for the
mounts (an allow list: ``/usr``, a few ``/etc`` files and the interpreter, read-only; one private tmpfs with
size and inode caps is the only writable place), no network, its own PID namespace, a seccomp filter
(:mod:`~sst_interp.sandbox.seccomp`), a clean environment. Inside, a supervisor
(:mod:`~sst_interp.sandbox.supervisor`) owns the reply channel and runs the interpreter
(:mod:`~sst_interp.sandbox.driver`). ``subprocess``: a plain child in its own session with rlimits, a clean
environment and a temporary working directory; it is NOT a security boundary (no network, PID or filesystem
isolation; processes that leave its process group survive it), and is used only when asked for explicitly.

How the process count is contained, also for a root caller. ``RLIMIT_NPROC`` is skipped by the kernel for
kernel uid 0 (and for ``CAP_SYS_RESOURCE``/``CAP_SYS_ADMIN``), and ``bwrap --unshare-user --uid N`` only
changes the uid seen inside: the kernel uid stays the caller's, so as root nothing is counted. And the count
is per user: for an ordinary caller a small limit would include every process that user runs. So:

1. A root caller runs bwrap privileged, with all capabilities dropped but ``CAP_SETUID``/``CAP_SETGID``; the
   bootstrap (:mod:`~sst_interp.sandbox.bootstrap`) first switches to uid/gid 65534 (kernel uid no longer
   0, all capabilities cleared). An unprivileged caller runs bwrap in its own user namespace as itself.
2. The bootstrap then enters a new user namespace (``unshare(CLONE_NEWUSER)``, needs unprivileged user
   namespaces) and only then sets ``RLIMIT_NPROC``. Since Linux 5.14 the count is kept per (user
   namespace, uid), so it covers exactly the sandbox's processes; the namespace was created under the
   caller's (large) limit, so the parent levels do not interfere.
3. It execs the interpreter (``PR_SET_NO_NEW_PRIVS`` already set), which drops the capabilities the new
   namespace granted; the code cannot raise the hard limit (that needs ``CAP_SYS_RESOURCE`` in the initial
   namespace).

On kernels before 5.14 the count is per uid across the machine instead: sandboxes of a root caller then
share one budget, and an ordinary caller's small limit would include all of that user's processes.

Measured on the development machine (root, kernel 6.18), before the supervisor existed: with
``max_processes=8``, a loop starting 50 ``sleep`` processes got 7 (the interpreter was the 8th; the supervisor
now takes one more) and then ``EAGAIN``, in each of 8 sandboxes
running at once; the same as an ordinary user (uid 65534 running bwrap itself).
"""

from sst_interp.sandbox.check import check_backend
from sst_interp.sandbox.config import BACKENDS, SandboxConfig
from sst_interp.sandbox.oneshot import ExecutionResult, run_program
from sst_interp.sandbox.process import SandboxError
from sst_interp.sandbox.session import CodeResult, PythonSession

__all__ = [
    "BACKENDS",
    "CodeResult",
    "ExecutionResult",
    "PythonSession",
    "SandboxConfig",
    "SandboxError",
    "check_backend",
    "run_program",
]
