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
- ``workdir_tmpfs``: ``{"size": bytes, "inodes": n}`` or ``null``. Set with ``new_userns``: the new user
  namespace comes with a new mount namespace, this process's uid and gid are mapped to themselves in it, and
  a tmpfs capped at ``size`` bytes and ``inodes`` inodes, owned by that uid, is mounted on ``cwd``. It is the
  sandbox's only writable place (bwrap makes ``/tmp`` a link to it), so disk use and file count are capped per
  sandbox, not per file. bwrap's ``--size`` has no inode option, hence the mount here.
- ``seccomp_hex``: a BPF program (hex) installed last, after the mount: it refuses every mount call and every new
  namespace. bwrap's own filter (``--seccomp``) refuses everything else and must leave mounting and this
  process's own ``unshare`` to this step.
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
PR_SET_SECCOMP = 22
PR_SET_DUMPABLE = 4
SECCOMP_MODE_FILTER = 2
CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
MS_NOSUID = 2
MS_NODEV = 4
BPF_INSTRUCTION_BYTES = 8


class SockFprog(ctypes.Structure):
    """``struct sock_fprog``: the length (in instructions) and address of a BPF program."""

    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(text)


def _private_tmpfs(libc, cwd: str, size: int, inodes: int) -> None:
    """New user and mount namespaces with this uid/gid mapped to themselves; a capped tmpfs on ``cwd``."""
    uid, gid = os.geteuid(), os.getegid()
    # setuid made this process non-dumpable, which makes its /proc/self files root's: the map files below
    # could not be written. The exec that follows makes every later program dumpable anyway.
    if libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0:
        _fail("prctl(PR_SET_DUMPABLE)", ctypes.get_errno())
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        _fail("unshare(CLONE_NEWUSER | CLONE_NEWNS)", ctypes.get_errno())
    try:
        _write("/proc/self/setgroups", "deny")  # required before an unprivileged gid_map
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    except OSError as err:
        _fail("mapping the uid in the new user namespace", err.errno or 0)
    options = f"size={size},nr_inodes={inodes},mode=0700,uid={uid},gid={gid}".encode()
    if libc.mount(b"tmpfs", cwd.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
        _fail(f"mounting the working directory's tmpfs on {cwd}", ctypes.get_errno())


def _install_filter(libc, program: bytes) -> None:
    """Add the seccomp BPF ``program`` to this process (``PR_SET_NO_NEW_PRIVS`` is already set)."""
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // BPF_INSTRUCTION_BYTES, ctypes.addressof(buffer))
    if libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog), 0, 0) != 0:
        _fail("installing the seccomp filter", ctypes.get_errno())


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
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        _fail("prctl(PR_SET_NO_NEW_PRIVS)", ctypes.get_errno())
    tmpfs = spec["workdir_tmpfs"]
    if tmpfs is not None:
        _private_tmpfs(libc, spec["cwd"], tmpfs["size"], tmpfs["inodes"])
    elif spec["new_userns"] and libc.unshare(CLONE_NEWUSER) != 0:
        _fail("unshare(CLONE_NEWUSER)", ctypes.get_errno())
    try:
        os.chdir(spec["cwd"])  # after the mount, so the working directory is the tmpfs
    except OSError as err:
        _fail(f"chdir {spec['cwd']}", err.errno or 0)
    os.environ["PWD"] = spec["cwd"]  # bwrap set it to where it started; shells trust it
    if spec["seccomp_hex"]:
        _install_filter(libc, bytes.fromhex(spec["seccomp_hex"]))
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
