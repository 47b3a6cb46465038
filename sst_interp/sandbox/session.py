"""A persistent sandboxed Python interpreter: blocks of code run one after another in one namespace.

Use it as a context manager::

    with PythonSession(SandboxConfig()) as session:
        session.execute("x = 6 * 7")
        result = session.execute("print(x); finish_session(f'The answer is {x}.')")
        # result.stdout == "42\\n", result.finish_answer == "The answer is 42."

Inside the sandbox a supervisor (:mod:`~sst_interp.sandbox.supervisor`) owns the reply channel; the
interpreter that runs the code answers it with a per-block nonce, so a frame the code writes itself is never
taken for a reply. After a timeout, when the interpreter dies (``RLIMIT_CPU``, out of memory, ``os._exit``)
or when its channel carried a forged frame, it is killed and the next :meth:`PythonSession.execute` runs in
a fresh interpreter, saying in its stderr that earlier variables are lost. When a block returns, every
other process it started is killed. The working directory (a tmpfs of the sandbox, capped in size and inodes;
see :mod:`~sst_interp.sandbox.bwrap`) and the files the code wrote there last as long as the sandbox: across
interpreter restarts, but not when the whole sandbox had to be replaced (its supervisor failed), which the
next block's note says.

Nothing the code does makes :meth:`~PythonSession.execute` raise: a broken or silent supervisor is that
block's ``error`` (or ``timeout``) with a ``[sandbox]`` note, and the next block starts a fresh sandbox. Only
a sandbox that cannot start at all raises :class:`~sst_interp.sandbox.process.SandboxError`.

One session serves one thread at a time. Different sessions may run in different threads. Because of
bwrap's ``--die-with-parent``, an interpreter lives no longer than the thread that started it (Linux ties
the parent-death signal to the thread); a later ``execute`` then reports that it died and starts another.
"""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass

from sst_interp.sandbox.check import check_backend
from sst_interp.sandbox.config import SandboxConfig
from sst_interp.sandbox.output import CaptureFiles
from sst_interp.sandbox.process import SandboxError, SandboxProcess, make_workdir, remove_workdir
from sst_interp.sandbox.protocol import (
    ChannelClosed,
    ChannelTimeout,
    MessageReader,
    ProtocolError,
    parse_reply,
    send_message,
)

START_TIMEOUT_S = 60.0  # an interpreter normally starts in well under a second; this only bounds a hang
SUPERVISOR_GRACE_S = 3.0  # past the block's timeout, how long the supervisor may take to report it


@dataclass(frozen=True)
class CodeResult:
    """What one block did.

    Args:
        stdout: what the block (and any process it started) wrote to fd 1 while it ran, capped.
        stderr: the same for fd 2: tracebacks as Python prints them (the block's file is ``<block>``),
            preceded by a ``[sandbox]`` note when the interpreter was restarted and followed by one when
            this block timed out or killed the interpreter; capped.
        status: ``"ok"``, ``"error"`` (an exception, or the interpreter died) or ``"timeout"``.
        finish_answer: ``str(answer)`` of the block's last ``finish_session(answer)`` call, else None.
        seconds: wall-clock seconds of the call, a restart included.
    """

    stdout: str
    stderr: str
    status: str
    finish_answer: str | None
    seconds: float


class _Resources:
    """What a session holds on the host; released by ``close`` or, if forgotten, by the garbage collector."""

    def __init__(self) -> None:
        self.workdir: str | None = None
        self.capture: CaptureFiles | None = None
        self.process: SandboxProcess | None = None
        # close() may come from another thread while a block runs; the block then ends as an error
        self.lock = threading.RLock()

    def stop_process(self) -> None:
        with self.lock:
            process, self.process = self.process, None
            if process is not None:
                process.close()

    def read_output(self, cap: int) -> tuple[str, str]:
        """The block's captured output, or nothing once the session was closed meanwhile."""
        with self.lock:
            return self.capture.read(cap) if self.capture is not None else ("", "")

    def release(self) -> None:
        with self.lock:
            self.stop_process()
            if self.capture is not None:
                self.capture.close()
                self.capture = None
            if self.workdir is not None:
                remove_workdir(self.workdir)
                self.workdir = None


class PythonSession:
    """One sandboxed ``python`` whose namespace persists across :meth:`execute` calls.

    Args:
        config: backend and limits; None means :class:`SandboxConfig` ``()``. Checked at once
            (:func:`~sst_interp.sandbox.check.check_backend`): a missing ``bwrap`` is a
            :class:`~sst_interp.kernels.errors.UsageError` here, not at the first block.
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config if config is not None else SandboxConfig()
        check_backend(self.config)
        self._resources = _Resources()
        self._finalizer = weakref.finalize(self, self._resources.release)
        self._reader: MessageReader | None = None
        self._lost: str | None = None  # why the previous interpreter ended, told to the next block
        self._files_lost = False  # the whole sandbox was replaced, and with it its tmpfs
        self._closed = False
        self.starts = 0
        self.last_start_seconds = 0.0
        self.last_death: str | None = None  # how the interpreter ended in the last block, if it died

    def __enter__(self) -> PythonSession:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the interpreter if none runs (``execute`` does this itself when needed).

        Raises:
            SandboxError: the sandbox did not come up; the message has the backend's error output.
        """
        if self._closed:
            raise RuntimeError("this PythonSession is closed")
        resources = self._resources
        if resources.workdir is None:
            resources.workdir = make_workdir()
            resources.capture = CaptureFiles()
        if resources.process is not None:
            return
        began = time.monotonic()
        resources.capture.reset()
        process = SandboxProcess.launch(self.config, resources.workdir, resources.capture, ["session"], channel=True)
        reader = MessageReader(process.result_fd, process.exit_fd)
        try:
            ready = reader.read(time.monotonic() + START_TIMEOUT_S)
            if ready.get("ready") is not True:
                raise ProtocolError(f"expected the ready message, got {ready!r}"[:200])
        except (ChannelTimeout, ChannelClosed, ProtocolError) as err:
            process.close()
            _, stderr = resources.capture.read(2000)
            raise SandboxError(f"the sandboxed interpreter did not start ({err}; {process.exit_reason()}): "
                               f"{stderr.strip()}") from err
        resources.process, self._reader = process, reader
        self.starts += 1
        self.last_start_seconds = time.monotonic() - began

    def execute(self, code: str) -> CodeResult:
        """Run ``code`` in the session's namespace (see :class:`CodeResult`); returns within ``timeout_s``
        plus the time to start an interpreter when one had to be started."""
        return self._run(code, program=False)

    def _run(self, code: str, program: bool) -> CodeResult:
        """One block; ``program`` runs it as a script in a fresh ``__main__`` (:mod:`.oneshot`)."""
        began = time.monotonic()
        notice = ""
        if self._resources.process is None:
            self.start()
        if self._lost is not None:
            files = ("the working directory and its files are lost too" if self._files_lost
                     else "files in the working directory are kept")
            notice = (f"[sandbox] the previous interpreter was stopped ({self._lost}); this block ran in a "
                      f"fresh one: variables, functions and imports of earlier blocks are lost ({files}).\n")
            self._lost, self._files_lost = None, False
        process, capture = self._resources.process, self._resources.capture
        capture.reset()
        timeout = self.config.timeout_s
        deadline = time.monotonic() + timeout + SUPERVISOR_GRACE_S
        status, finish_answer, footer = "error", None, ""
        self.last_death = None
        try:
            send_message(process.command_fd, {"code": code, "timeout_s": timeout, "program": program}, deadline)
            reply = parse_reply(self._reader.read(deadline))
            status, finish_answer = reply.status, reply.finish_answer
            footer = self._event_footer(reply.event, reply.detail, timeout)
        except ChannelTimeout:
            status = "timeout"
            self._stop_sandbox(f"the sandbox did not answer within {timeout:g} s")
            footer = (f"[sandbox] timed out after {timeout:g} s and the sandbox did not answer: it was killed with "
                      f"every process in it; the next block runs in a fresh interpreter (earlier variables are "
                      f"lost).")
        except (ChannelClosed, ProtocolError, OSError) as err:
            status, finish_answer = "error", None
            self._stop_sandbox(f"the sandbox failed: {err}")
            footer = (f"[sandbox] the sandbox's supervisor failed ({err}); it was killed with every process in "
                      f"it, and the next block runs in a fresh interpreter (earlier variables are lost).")
        stdout, stderr = self._resources.read_output(self.config.output_cap_chars)
        if footer:
            stderr = f"{stderr}{'' if not stderr or stderr.endswith(chr(10)) else chr(10)}{footer}\n"
        return CodeResult(stdout=stdout, stderr=notice + stderr, status=status, finish_answer=finish_answer,
                          seconds=time.monotonic() - began)

    def _event_footer(self, event: str | None, detail: str, timeout: float) -> str:
        """The ``[sandbox]`` note for what the supervisor reports happened to the interpreter ("" if nothing)."""
        if event == "timeout":
            self._lost = f"timeout after {timeout:g} s"
            return (f"[sandbox] timed out after {timeout:g} s: the interpreter and every process it started "
                    f"were killed; the next block runs in a fresh interpreter (earlier variables are lost).")
        if event == "died":
            self._lost, self.last_death = f"it died: {detail}", detail
            return (f"[sandbox] the Python interpreter died ({detail}); the next block runs in a fresh "
                    f"interpreter (earlier variables are lost).")
        if event == "forged":
            self._lost = "its reply channel carried a forged frame"
            return (f"[sandbox] the interpreter's reply channel carried something its driver did not send "
                    f"({detail}), so the block's own result is unknown; the interpreter was killed and the next "
                    f"block runs in a fresh interpreter (earlier variables are lost).")
        return ""

    def _stop_sandbox(self, reason: str) -> None:
        """Kill the whole sandbox; remember why for the next block."""
        self._resources.stop_process()
        self._reader = None
        self._lost = reason
        # the bwrap backend's working directory is a tmpfs of the sandbox, gone with it
        self._files_lost = self.config.backend == "bwrap"

    def close(self) -> None:
        """Kill the interpreter and everything it started; remove the working directory. Idempotent."""
        self._closed = True
        self._reader = None
        self._finalizer()

