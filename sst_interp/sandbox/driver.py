"""The interpreter side of the sandbox: runs model code in one persistent namespace.

The supervisor (:mod:`~sst_interp.sandbox.supervisor`) runs this file's source inside the sandbox as
``python -s -u -c <source> session CMD_FD RESULT_FD`` (the package is not visible there, so only the standard
library may be imported). Modes:

``session CMD_FD RESULT_FD``
    A loop: read one message ``{"code": str, "nonce": str, "program": bool}`` from ``CMD_FD``, run the code in
    the namespace kept across messages, write ``{"status": "ok" | "error", "finish_answer": str | None,
    "nonce": nonce}`` to ``RESULT_FD``: ``ok`` only when ``exec`` returned, i.e. the code ran to its end
    (``SystemExit`` is an ``error``; ``os._exit`` ends the process, which the supervisor sees). Messages are
    a 4-byte big-endian length and that many bytes of UTF-8 JSON. Before the first command the driver
    writes a reply whose nonce is ``"ready"``. It ends when ``CMD_FD`` reaches end of file.

    ``program`` blocks (HumanEval grading) run in a fresh ``__main__`` named ``program.py`` with the socket
    constructors replaced by functions that raise ``OSError("network access is disabled ...")``.

    Output is not part of the messages: fds 1 and 2 are files the parent opened outside the sandbox, so
    everything the code and its subprocesses print lands there.

    Tracebacks name the code ``<block>`` (``program.py`` for programs) and leave out the driver's own
    frame, as Python would print them for a script of that name.

    The functions the reply depends on (``json.dumps``, ``os.write``) are bound when the driver starts, so
    code that replaces them in their modules does not change the reply.

``probe``
    Exit at once with status 0 (the parent's check that a sandbox can start here).
"""

import builtins
import json
import os
import socket
import struct
import sys
import traceback
import types

HEADER = struct.Struct(">I")
EXECUTE_FILENAME = "<block>"  # not "<execute>": that text is an action token of the model
PROGRAM_FILENAME = "program.py"
MAX_FINISH_CHARS = 100_000  # the supervisor's cap on finish_session's answer
# bound now: model code replacing json.dumps or os.write in their modules must not change the reply
_DUMPS = json.dumps
_WRITE = os.write
_READ = os.read


def _read_exact(fd: int, size: int) -> bytes:
    """``size`` bytes from ``fd``; fewer only at end of file."""
    chunks = []
    while size:
        chunk = _READ(fd, size)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def receive(fd: int):
    """The next message from ``fd``, or None at end of file."""
    header = _read_exact(fd, HEADER.size)
    if len(header) < HEADER.size:
        return None
    (size,) = HEADER.unpack(header)
    body = _read_exact(fd, size)
    if len(body) < size:
        return None
    return json.loads(body.decode("utf-8"))


def send(fd: int, message: dict) -> None:
    """Write ``message`` to ``fd`` as one framed JSON message."""
    body = _DUMPS(message, ensure_ascii=True).encode("ascii")
    data = HEADER.pack(len(body)) + body
    while data:
        written = _WRITE(fd, data)
        data = data[written:]


class BlockSources:
    """Source lines of every block run so far, by code object, so tracebacks show the right line.

    All blocks share the filename ``<execute>``, so :mod:`linecache` cannot tell them apart; a function
    defined in block 1 and failing in block 3 must show block 1's line.
    """

    def __init__(self) -> None:
        self.lines_by_code: dict = {}

    def add(self, code: types.CodeType, source: str) -> None:
        lines = source.splitlines()
        stack = [code]
        while stack:
            current = stack.pop()
            self.lines_by_code[current] = lines
            stack.extend(const for const in current.co_consts if isinstance(const, types.CodeType))

    def line(self, code: types.CodeType, lineno) -> str:
        lines = self.lines_by_code.get(code)
        if lines is None or lineno is None or not 1 <= lineno <= len(lines):
            return ""
        return lines[lineno - 1]


def _with_block_lines(summary: traceback.TracebackException, tb, sources: BlockSources) -> None:
    """Fill the source lines of the ``<execute>`` frames of ``summary`` (one exception, not its chain) in place."""
    frames = [frame for frame, _ in traceback.walk_tb(tb)]
    if len(frames) == len(summary.stack):
        rebuilt = []
        for frame, entry in zip(frames, summary.stack):
            if entry.filename in (EXECUTE_FILENAME, PROGRAM_FILENAME):
                extra = {}
                for name in ("end_lineno", "colno", "end_colno"):  # caret positions exist from Python 3.11
                    if hasattr(entry, name):
                        extra[name] = getattr(entry, name)
                entry = traceback.FrameSummary(entry.filename, entry.lineno, entry.name, lookup_line=False,
                                               line=sources.line(frame.f_code, entry.lineno), **extra)
            rebuilt.append(entry)
        summary.stack = traceback.StackSummary.from_list(rebuilt)


def format_block_exception(err: BaseException, skip_driver_frame: bool, sources: BlockSources) -> str:
    """The traceback of ``err`` as Python prints it, without the driver's frame, with block source lines."""
    tb = err.__traceback__.tb_next if (skip_driver_frame and err.__traceback__ is not None) else err.__traceback__
    if isinstance(err, SyntaxError) and tb is None:
        return "".join(traceback.format_exception_only(type(err), err))
    summary = traceback.TracebackException(type(err), err, tb, lookup_lines=False, compact=True)
    _with_block_lines(summary, tb, sources)
    # chained exceptions (``raise ... from``, or raised while handling) have stacks of their own
    # (their tracebacks never passed through the driver's frame, so nothing is skipped there)
    seen = {id(err)}
    chained_summary, chained_exc = summary, err
    while True:
        if chained_exc.__cause__ is not None and chained_summary.__cause__ is not None:
            chained_summary, chained_exc = chained_summary.__cause__, chained_exc.__cause__
        elif (chained_exc.__context__ is not None and chained_summary.__context__ is not None
              and not chained_exc.__suppress_context__):
            chained_summary, chained_exc = chained_summary.__context__, chained_exc.__context__
        else:
            break
        if id(chained_exc) in seen:
            break
        seen.add(id(chained_exc))
        _with_block_lines(chained_summary, chained_exc.__traceback__, sources)
    return "".join(summary.format())


def _flush_standard_streams() -> None:
    """Flush ``sys.stdout``/``sys.stderr`` before the reply, so the parent reads all of the block's output."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            # the code may have replaced or closed the stream; its output is then its own business
            continue


def run_block(source: str, namespace: dict, sources: BlockSources, filename: str = EXECUTE_FILENAME) -> str:
    """Run one block in ``namespace``; print any exception to stderr. Returns ``"ok"`` or ``"error"``."""
    try:
        code = compile(source, filename, "exec")
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError) as err:
        # compile's own failures (ValueError: null bytes); the traceback would show only the driver
        sys.stderr.write(format_block_exception(err, skip_driver_frame=True, sources=sources))
        return "error"
    sources.add(code, source)
    try:
        exec(code, namespace)
    except BaseException as err:  # noqa: BLE001 - the block's own exception (SystemExit too) is its result
        try:
            text = format_block_exception(err, skip_driver_frame=True, sources=sources)
        except Exception as format_error:  # noqa: BLE001 - a broken __str__ etc. must not kill the session
            text = f"{type(err).__name__}: <exception could not be formatted: {format_error!r}>\n"
        sys.stderr.write(text)
        return "error"
    return "ok"


def session_loop(cmd_fd: int, result_fd: int) -> None:
    """Serve blocks from ``cmd_fd`` until end of file (see the module docstring)."""
    for fd in (cmd_fd, result_fd):
        os.set_inheritable(fd, False)  # subprocesses of the code must not hold the control pipes
    state = {"finish": None}

    def finish_session(answer) -> None:
        """Record ``str(answer)`` as this block's final answer (the last call wins); the block goes on."""
        state["finish"] = str(answer)

    # A real ``__main__`` module, so functions and classes the code defines pickle like a script's.
    main_module = types.ModuleType("__main__")
    main_module.__dict__.update({"__builtins__": builtins, "finish_session": finish_session})
    state["driver_module"] = sys.modules.get("__main__")  # keep the driver's own globals alive
    sys.modules["__main__"] = main_module
    sys.argv = [""]
    sources = BlockSources()
    send(result_fd, {"status": "ok", "finish_answer": None, "nonce": "ready"})
    while True:
        message = receive(cmd_fd)
        if message is None:
            return
        nonce = message["nonce"]
        state["finish"] = None
        if message["program"]:
            status = run_program(message["code"], sources)
        else:
            status = run_block(message["code"], main_module.__dict__, sources)
        _flush_standard_streams()
        finish = state["finish"]
        # cut here too: a reply over the supervisor's size limit would be taken for a forged one
        finish = finish[:MAX_FINISH_CHARS] if isinstance(finish, str) else None
        send(result_fd, {"status": status, "finish_answer": finish, "nonce": nonce})


def _disable_socket_api() -> None:
    """Replace the socket constructors and resolvers with functions that raise ``OSError``."""
    def no_network(*args, **kwargs):
        raise OSError("network access is disabled while grading")

    for name in ("socket", "create_connection", "socketpair", "getaddrinfo", "fromfd", "create_server"):
        setattr(socket, name, no_network)


def run_program(source: str, sources: BlockSources) -> str:
    """Run ``source`` as a script named ``program.py`` in a fresh ``__main__``; ``"ok"`` only if it ran to its end."""
    _disable_socket_api()
    sys.argv = [PROGRAM_FILENAME]
    main_module = types.ModuleType("__main__")
    main_module.__dict__.update({"__builtins__": builtins, "__file__": PROGRAM_FILENAME})
    sys.modules["__main__"] = main_module
    return run_block(source, main_module.__dict__, sources, PROGRAM_FILENAME)


def main(argv: list) -> None:
    """Dispatch on the mode (``argv[1]``)."""
    mode = argv[1]
    if mode == "session":
        session_loop(int(argv[2]), int(argv[3]))
    elif mode == "probe":
        return  # the parent only checks that the sandbox starts and this interpreter runs
    else:
        raise SystemExit(f"sandbox driver: unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv)
