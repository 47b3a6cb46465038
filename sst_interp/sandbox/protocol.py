"""The parent's side of the control pipes: framed JSON messages, every wait bounded by a deadline.

A message is a 4-byte big-endian length and that many bytes of UTF-8 JSON (the supervisor, which runs inside
the sandbox and cannot import this module, has its own copy of the framing). Both pipe ends are
non-blocking and every wait uses ``select`` with the time left, so no call can outlive its deadline.

Nothing read is trusted: a message's size is capped, JSON too deep or with an over-long integer is a
:class:`ProtocolError` (not a ``RecursionError`` or ``ValueError`` escaping to the caller), a reply's fields
are type-checked (:func:`parse_reply`) and its strings made storable (lone surrogates replaced).
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from dataclasses import dataclass

HEADER = struct.Struct(">I")
MAX_MESSAGE_BYTES = 1024 * 1024  # a reply holds a status and finish_session's answer, nothing bulky
MAX_DETAIL_CHARS = 500
STATUSES = ("ok", "error", "timeout")
EVENTS = (None, "timeout", "died", "forged")


class ChannelTimeout(Exception):
    """The deadline passed before the message was complete."""


class ChannelClosed(Exception):
    """The other side is gone (end of file, broken pipe, or its process exited)."""


class ProtocolError(Exception):
    """The other side sent something that is not a framed JSON message."""


def _time_left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def send_message(fd: int, message: dict, deadline: float) -> None:
    """Write ``message`` to the non-blocking ``fd`` before ``deadline`` (``time.monotonic`` seconds)."""
    body = json.dumps(message).encode("utf-8")
    data = memoryview(HEADER.pack(len(body)) + body)
    while data:
        _, writable, _ = select.select([], [fd], [], _time_left(deadline))
        if not writable:
            raise ChannelTimeout("timed out writing to the interpreter")
        try:
            written = os.write(fd, data)
        except BlockingIOError:
            continue
        except (BrokenPipeError, ConnectionResetError) as err:
            raise ChannelClosed("the interpreter closed its command pipe") from err
        data = data[written:]


class MessageReader:
    """Reads framed messages from a non-blocking ``fd``; ``exit_fd`` (a pidfd) signals the process's end."""

    def __init__(self, fd: int, exit_fd: int | None = None) -> None:
        self.fd = fd
        self.exit_fd = exit_fd
        self.buffer = bytearray()

    def _complete(self) -> dict | None:
        """The first whole message in the buffer, removed from it, or None."""
        if len(self.buffer) < HEADER.size:
            return None
        (size,) = HEADER.unpack(self.buffer[:HEADER.size])
        if size > MAX_MESSAGE_BYTES:
            raise ProtocolError(f"message of {size} bytes is over the {MAX_MESSAGE_BYTES}-byte limit")
        if len(self.buffer) < HEADER.size + size:
            return None
        body = bytes(self.buffer[HEADER.size:HEADER.size + size])
        del self.buffer[:HEADER.size + size]
        try:
            message = json.loads(body.decode("utf-8"))
        except (ValueError, RecursionError) as err:  # ValueError: bad UTF-8 or JSON, an over-long integer
            raise ProtocolError(f"unreadable message: {type(err).__name__}: {str(err)[:200]}") from None
        if not isinstance(message, dict):
            raise ProtocolError(f"message is a {type(message).__name__}, not an object")
        return message

    def _read_available(self) -> bool:
        """Append what the pipe holds now; False at end of file."""
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            self.buffer += chunk
            if len(self.buffer) > MAX_MESSAGE_BYTES + HEADER.size:
                raise ProtocolError("more data than one message may hold")

    def read(self, deadline: float) -> dict:
        """The next message, waiting at most until ``deadline``.

        Raises:
            ChannelTimeout: nothing complete arrived in time.
            ChannelClosed: end of file, or the process behind ``exit_fd`` ended with no message pending.
            ProtocolError: malformed data.
        """
        while True:
            message = self._complete()
            if message is not None:
                return message
            watched = [self.fd] if self.exit_fd is None else [self.fd, self.exit_fd]
            readable, _, _ = select.select(watched, [], [], _time_left(deadline))
            if not readable:
                raise ChannelTimeout("timed out waiting for the interpreter")
            if not self._read_available():
                raise ChannelClosed("the interpreter closed its result pipe")
            if self.exit_fd in readable and self._complete_pending() is False:
                raise ChannelClosed("the interpreter's process ended")

    def _complete_pending(self) -> bool:
        """Whether a whole message is buffered (checked once the process has ended)."""
        if len(self.buffer) < HEADER.size:
            return False
        (size,) = HEADER.unpack(self.buffer[:HEADER.size])
        return len(self.buffer) >= HEADER.size + size


def storable(text: str) -> str:
    """``text`` with lone surrogates replaced, so the episodes table (UTF-8) can store it."""
    return text.encode("utf-8", "replace").decode("utf-8")


@dataclass(frozen=True)
class Reply:
    """The supervisor's answer to one block (see :mod:`~sst_interp.sandbox.supervisor`).

    Args:
        status: ``ok``, ``error`` or ``timeout``.
        finish_answer: the block's last ``finish_session`` argument as text, or None.
        event: None, or what happened to the interpreter: ``timeout``, ``died`` or ``forged``.
        detail: how it died, or what was forged ("" otherwise).
    """

    status: str
    finish_answer: str | None
    event: str | None
    detail: str


def parse_reply(message: dict) -> Reply:
    """Check a supervisor reply's fields and types; :class:`ProtocolError` if anything is off."""
    if set(message) != {"status", "finish_answer", "event", "detail"}:
        raise ProtocolError(f"a reply with the fields {sorted(map(str, message))[:8]}")
    status, finish, event, detail = (message[k] for k in ("status", "finish_answer", "event", "detail"))
    if status not in STATUSES or event not in EVENTS or not isinstance(detail, str):
        raise ProtocolError("a reply with an unknown status or event")
    if not (finish is None or isinstance(finish, str)):
        raise ProtocolError(f"finish_answer is a {type(finish).__name__}")
    return Reply(status, None if finish is None else storable(finish), event, storable(detail[:MAX_DETAIL_CHARS]))
