"""The first program inside the sandbox: drop privileges, apply the limits, exec the real interpreter.

The parent runs this file's source with ``python -I -c <source> <spec-json>`` (the package itself is not
visible inside the sandbox, so it must not import anything but the standard library). ``spec`` holds:

- ``drop_to``: ``[uid, gid]`` or ``null``. Set when the caller is root: bwrap then runs privileged and
  hands this process only ``CAP_SETUID``/``CAP_SETGID``; switching every uid to an unprivileged one
  makes the kernel clear all capabilities, and the kernel-side uid is no longer 0, which is what makes
  ``RLIMIT_NPROC`` count at all.
- ``new_userns``: enter a fresh user namespace before setting the limits. ``RLIMIT_NPROC`` is counted per
  (user namespace, uid); in a namespace of its own only the sandbox's processes count, not every process
  the same uid has elsewhere (other sandboxes, or an ordinary caller's whole desktop session). The
  namespace also makes set-uid-root programs inert (root is not mapped in it).
- ``cwd``: the working directory, entered after the switch of uid (a root caller's bwrap has no
  ``CAP_DAC_OVERRIDE`` left, and the directory belongs to the unprivileged uid).
- ``rlimits``: ``{"RLIMIT_CPU": [soft, hard], ...}``, applied after the namespace exists.
- ``argv``: what to exec. The exec also drops the capabilities a new user namespace grants its creator
  (the new program does not run as uid 0 of that namespace).

``PR_SET_NO_NEW_PRIVS`` is set too, so nothing exec'd later can gain privileges (set-uid bits, file
capabilities).
"""

import ctypes
import json
import os
import resource
import sys

PR_SET_NO_NEW_PRIVS = 38
CLONE_NEWUSER = 0x10000000


def _fail(step: str, errno: int) -> None:
    """Stop with a one-line reason on stderr (the parent reports it); exit status 125 marks a setup failure."""
    sys.stderr.write(f"sandbox bootstrap: {step} failed: {os.strerror(errno)}\n")
    sys.stderr.flush()
    os._exit(125)


def main(spec: dict) -> None:
    """Apply ``spec`` (see the module docstring) to this process, then exec ``spec["argv"]``."""
    libc = ctypes.CDLL(None, use_errno=True)
    if spec["drop_to"] is not None:
        uid, gid = spec["drop_to"]
        try:
            # groups and gid first: after setuid the capability to change them is gone
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        except OSError as err:
            _fail("dropping to an unprivileged uid", err.errno or 0)
    try:
        os.chdir(spec["cwd"])
    except OSError as err:
        _fail(f"chdir {spec['cwd']}", err.errno or 0)
    os.environ["PWD"] = spec["cwd"]  # bwrap set it to where it started; shells trust it
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        _fail("prctl(PR_SET_NO_NEW_PRIVS)", ctypes.get_errno())
    if spec["new_userns"] and libc.unshare(CLONE_NEWUSER) != 0:
        _fail("unshare(CLONE_NEWUSER)", ctypes.get_errno())
    for name, (soft, hard) in spec["rlimits"].items():
        try:
            resource.setrlimit(getattr(resource, name), (soft, hard))
        except (OSError, ValueError) as err:
            _fail(f"setrlimit({name})", getattr(err, "errno", None) or 22)
    argv = spec["argv"]
    try:
        os.execv(argv[0], argv)
    except OSError as err:
        _fail(f"exec {argv[0]}", err.errno or 0)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
