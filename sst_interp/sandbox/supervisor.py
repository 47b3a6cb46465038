"""The supervisor: the sandbox's first Python process. It owns the reply channel to the host; the interpreter
that runs model code never holds a descriptor of it.

The parent runs this file's source inside the sandbox (after :mod:`~sst_interp.sandbox.bootstrap`) as
``python -s -u -c <source> CMD_FD RESULT_FD SPEC_JSON``; only the standard library may be imported. ``SPEC``
holds ``interpreter`` (the argv of the driver in ``session`` mode; the supervisor appends the two fds of its
own pipes to it), ``pid_namespace`` (the sandbox has a PID namespace of its own, so every process in it
but this one and the interpreter may be killed) and ``cpu_seconds`` (for the wording of a SIGKILL).

Host → supervisor: ``{"code": str, "timeout_s": float, "program": bool}``. For each, the supervisor makes
a fresh random nonce, hands code and nonce to the interpreter, and waits at most ``timeout_s`` for one
reply frame carrying that nonce. Then:

- every other process of the sandbox is killed (background processes of a block do not outlive it; the
  supervisor is a child subreaper, so orphans come back to it and are reaped);
- it answers ``{"status": "ok" | "error" | "timeout", "finish_answer": str | None, "event": ..., "detail":
  str}``, ``event`` being None, ``"timeout"``, ``"died"`` (the interpreter ended; ``detail`` says how) or
  ``"forged"`` (the interpreter's channel carried something that is not the driver's reply to this block:
  a frame without the nonce, a second frame, bad JSON; ``detail`` says what).

On ``timeout``, ``died`` and ``forged`` the interpreter is killed and the next block starts a fresh one; the
working directory is kept. The supervisor marks itself non-dumpable, so code running as the same uid can
neither attach to it nor open its ``/proc`` descriptors.
"""

import ctypes
import json
import os
import select
import signal
import struct
import subprocess
import sys
import time

HEADER = struct.Struct(">I")
MAX_REPLY_BYTES = 1024 * 1024  # a reply holds a status and finish_session's answer
MAX_FINISH_CHARS = 100_000
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
READY_TIMEOUT_S = 60.0
SWEEP_TIMEOUT_S = 2.0
DEATH_GRACE_S = 1.0  # how long an interpreter whose pipe closed may take to exit by itself


class Forged(Exception):
    """The interpreter's channel held something other than the driver's reply to this block."""


def _read_exact(fd, size):
    chunks = []
    while size:
        chunk = os.read(fd, size)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def receive(fd):
    """The next host message from ``fd`` (blocking), or None at end of file."""
    header = _read_exact(fd, HEADER.size)
    if len(header) < HEADER.size:
        return None
    (size,) = HEADER.unpack(header)
    body = _read_exact(fd, size)
    return json.loads(body.decode("utf-8")) if len(body) == size else None


def send(fd, message):
    body = json.dumps(message, ensure_ascii=True).encode("ascii")
    data = HEADER.pack(len(body)) + body
    while data:
        data = data[os.write(fd, data):]


def storable(text):
    """``text`` with lone surrogates replaced, so any UTF-8 writer can store it."""
    return text.encode("utf-8", "replace").decode("utf-8")


def parse_reply(body, nonce):
    """The driver's reply ``(status, finish_answer)`` from ``body``; :class:`Forged` if it is anything else."""
    try:
        message = json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError, UnicodeDecodeError) as err:  # ValueError: JSON and huge integers
        raise Forged(f"unreadable reply ({type(err).__name__})") from None
    if not isinstance(message, dict) or set(message) != {"status", "finish_answer", "nonce"}:
        raise Forged("a reply of the wrong shape")
    if message["nonce"] != nonce:
        raise Forged("a reply without this block's nonce")
    status, finish = message["status"], message["finish_answer"]
    if status not in ("ok", "error") or not (finish is None or isinstance(finish, str)):
        raise Forged("a reply with bad field types")
    if finish is not None:
        finish = storable(finish[:MAX_FINISH_CHARS])
    return status, finish


def describe_status(returncode, cpu_seconds):
    """How a process ended (a ``Popen.returncode``: negative for a signal), in words."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        number = -returncode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        if number == signal.SIGKILL:
            return f"killed by {name} (memory exhausted, the CPU limit of {cpu_seconds} s, or a kill)"
        if number == signal.SIGXCPU:
            return f"killed by {name} (the CPU limit of {cpu_seconds} s)"
        return f"killed by {name}"
    return f"exited with status {returncode}"


class Interpreter:
    """The driver process that runs model code, with the supervisor's ends of its two pipes."""

    def __init__(self, argv):
        command_read, self.command_fd = os.pipe()
        self.result_fd, result_write = os.pipe()
        # a session of its own: without a PID namespace its process group is what can be killed
        self.popen = subprocess.Popen([*argv, str(command_read), str(result_write)],
                                      pass_fds=(command_read, result_write), start_new_session=True)
        os.close(command_read)
        os.close(result_write)
        self.pidfd = os.pidfd_open(self.popen.pid)
        self.buffer = bytearray()
        self.status = None  # the wait status once reaped

    def read_frame(self, deadline, nonce):
        """The next reply, ``"died"`` when the process ended first, or None at the deadline."""
        while True:
            if len(self.buffer) >= HEADER.size:
                (size,) = HEADER.unpack(self.buffer[:HEADER.size])
                if size > MAX_REPLY_BYTES:
                    raise Forged(f"a reply of {size} bytes")
                if len(self.buffer) >= HEADER.size + size:
                    body = bytes(self.buffer[HEADER.size:HEADER.size + size])
                    extra = len(self.buffer) - HEADER.size - size
                    if extra:
                        raise Forged("more than one reply")
                    self.buffer.clear()
                    return parse_reply(body, nonce)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            readable, _, _ = select.select([self.result_fd, self.pidfd], [], [], left)
            if self.result_fd in readable:
                chunk = os.read(self.result_fd, 65536)
                if chunk:
                    self.buffer += chunk
                    if len(self.buffer) > MAX_REPLY_BYTES + HEADER.size:
                        raise Forged("more data than a reply may hold")
                    continue
                return "died"
            if self.pidfd in readable:
                return "died"

    def stop(self):
        """Kill the process group, reap the process, close the pipes."""
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)  # not reaped yet, so the group id is still ours
        except ProcessLookupError:
            pass  # already gone
        self.popen.wait()
        self.status = self.popen.returncode
        for fd in (self.command_fd, self.result_fd, self.pidfd):
            os.close(fd)


def _reap(pid):
    """Reap ``pid`` if it is an exited child of ours (orphans come to us as the subreaper)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child: its own parent reaps it


def sweep(keep):
    """Kill every process of the PID namespace except init, this one and ``keep``; wait until they are gone."""
    me = os.getpid()
    deadline = time.monotonic() + SWEEP_TIMEOUT_S
    while time.monotonic() < deadline:
        others = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) not in (1, me, *keep):
                others.append(int(entry))
        alive = []
        for pid in others:
            _reap(pid)
            try:
                with open(f"/proc/{pid}/stat", "rb") as handle:
                    state = handle.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue  # it ended while we looked
            if state != b"Z":
                alive.append(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
        if not alive:
            return
        time.sleep(0.001)


def serve(command_fd, result_fd, spec):
    """Answer host messages until end of file (see the module docstring)."""
    interpreter = None
    first = True
    while True:
        if interpreter is None:
            interpreter = Interpreter(spec["interpreter"])
            ready = interpreter.read_frame(time.monotonic() + READY_TIMEOUT_S, "ready")
            if not isinstance(ready, tuple):
                interpreter.stop()
                reason = describe_status(interpreter.status, spec["cpu_seconds"])
                send(result_fd, {"ready": False, "detail": f"the interpreter did not start ({reason})"})
                return
            if first:
                send(result_fd, {"ready": True})
                first = False
        message = receive(command_fd)
        if message is None:
            interpreter.stop()
            return
        nonce = os.urandom(16).hex()
        status, finish, event, detail = "error", None, None, ""
        try:
            send(interpreter.command_fd, {"code": message["code"], "nonce": nonce, "program": message["program"]})
            outcome = interpreter.read_frame(time.monotonic() + message["timeout_s"], nonce)
        except Forged as err:
            outcome, detail = "forged", str(err)
        except BrokenPipeError:
            outcome = "died"
        if isinstance(outcome, tuple):
            status, finish = outcome
        elif outcome is None:
            status, event = "timeout", "timeout"
        else:
            event = outcome
        if event is not None:
            if event == "died":
                try:
                    interpreter.popen.wait(DEATH_GRACE_S)  # it is ending by itself: its own status, not our kill
                    detail = describe_status(interpreter.popen.returncode, spec["cpu_seconds"])
                except subprocess.TimeoutExpired:
                    detail = "it closed its reply pipe and was killed"
            interpreter.stop()
            interpreter = None
        if spec["pid_namespace"]:
            sweep(() if interpreter is None else (interpreter.popen.pid,))
        send(result_fd, {"status": status, "finish_answer": finish, "event": event, "detail": detail})


def main(argv):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # same-uid code cannot ptrace it or open /proc/<pid>/fd
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans of the code come back here, to be reaped
    command_fd, result_fd = int(argv[1]), int(argv[2])
    for fd in (command_fd, result_fd):
        os.set_inheritable(fd, False)  # the interpreter must not hold the host's channel
    serve(command_fd, result_fd, json.loads(argv[3]))


if __name__ == "__main__":
    main(sys.argv)
