"""A persistent sandboxed Python interpreter: blocks of code run one after another in one namespace.

Use it as a context manager::

    with PythonSession(SandboxConfig()) as session:
        session.execute("x = 6 * 7")
        result = session.execute("print(x); finish_session(f'The answer is {x}.')")
        # result.stdout == "42\\n", result.finish_answer == "The answer is 42."

After a timeout, or when the interpreter dies (``RLIMIT_CPU``, out of memory, ``os._exit``), every
process of the sandbox is killed and the next :meth:`PythonSession.execute` starts a fresh interpreter,
saying in its stderr that earlier variables are lost. The working directory (and the files the code wrote
there) lasts for the whole session.

One session serves one thread at a time. Different sessions may run in different threads. Because of
bwrap's ``--die-with-parent``, an interpreter lives no longer than the thread that started it (Linux ties
the parent-death signal to the thread); a later ``execute`` then reports that it died and starts another.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass

from sst_interp.sandbox.check import check_backend
from sst_interp.sandbox.config import SandboxConfig
from sst_interp.sandbox.output import CaptureFiles
from sst_interp.sandbox.process import SandboxError, SandboxProcess, make_workdir, remove_workdir
from sst_interp.sandbox.protocol import ChannelClosed, ChannelTimeout, MessageReader, ProtocolError, send_message

DEATH_GRACE_S = 1.0  # how long a dying sandbox may take to exit by itself before it is killed
START_TIMEOUT_S = 60.0  # an interpreter normally starts in well under a second; this only bounds a hang


@dataclass(frozen=True)
class CodeResult:
    """What one block did.

    Args:
        stdout: what the block (and any process it started) wrote to fd 1 while it ran, capped.
        stderr: the same for fd 2: tracebacks as Python prints them (the block's file is ``<execute>``),
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

    def stop_process(self) -> None:
        if self.process is not None:
            self.process.close()
            self.process = None

    def release(self) -> None:
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
            :class:`~sst_interp.errors.UsageError` here, not at the first block.
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config if config is not None else SandboxConfig()
        check_backend(self.config)
        self._resources = _Resources()
        self._finalizer = weakref.finalize(self, self._resources.release)
        self._reader: MessageReader | None = None
        self._lost: str | None = None  # why the previous interpreter ended, told to the next block
        self._closed = False
        self.starts = 0
        self.last_start_seconds = 0.0

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
        began = time.monotonic()
        notice = ""
        if self._resources.process is None:
            self.start()
            if self._lost is not None:
                notice = (f"[sandbox] the previous interpreter was stopped ({self._lost}); this block ran in a "
                          f"fresh one: variables, functions and imports of earlier blocks are lost (files in "
                          f"the working directory are kept).\n")
                self._lost = None
        process, capture = self._resources.process, self._resources.capture
        capture.reset()
        timeout = self.config.timeout_s
        deadline = time.monotonic() + timeout
        status, finish_answer, footer = "error", None, ""
        try:
            send_message(process.command_fd, {"code": code}, deadline)
            reply = self._reader.read(deadline)
            status, finish_answer = reply.get("status"), reply.get("finish_answer")
            if status not in ("ok", "error") or not (finish_answer is None or isinstance(finish_answer, str)):
                raise ProtocolError(f"unexpected reply {reply!r}"[:200])
        except ChannelTimeout:
            status = "timeout"
            self._stop(f"timeout after {timeout:g} s")
            footer = (f"[sandbox] timed out after {timeout:g} s: the interpreter and every process it started "
                      f"were killed; the next block runs in a fresh interpreter (earlier variables are lost).")
        except ChannelClosed:
            status, finish_answer = "error", None
            # it is ending on its own: let it, so its exit status (not our kill) says how it ended
            process.wait_exit(DEATH_GRACE_S)
            reason = self._stop(None)
            footer = (f"[sandbox] the Python interpreter died ({reason}); the next block runs in a fresh "
                      f"interpreter (earlier variables are lost).")
        except ProtocolError as err:
            status, finish_answer = "error", None
            self._stop(f"broken control channel: {err}")
            footer = (f"[sandbox] the interpreter's control channel broke ({err}); it was killed and the next "
                      f"block runs in a fresh interpreter (earlier variables are lost).")
        stdout, stderr = capture.read(self.config.output_cap_chars)
        if footer:
            stderr = f"{stderr}{'' if not stderr or stderr.endswith(chr(10)) else chr(10)}{footer}\n"
        return CodeResult(stdout=stdout, stderr=notice + stderr, status=status, finish_answer=finish_answer,
                          seconds=time.monotonic() - began)

    def _stop(self, reason: str | None) -> str:
        """Kill the interpreter; remember why for the next block. Returns how it ended."""
        process = self._resources.process
        self._resources.stop_process()
        self._reader = None
        ended = process.exit_reason() if process is not None else "not running"
        self._lost = reason if reason is not None else f"it died: {ended}"
        return ended

    def close(self) -> None:
        """Kill the interpreter and everything it started; remove the working directory. Idempotent."""
        self._closed = True
        self._reader = None
        self._finalizer()

