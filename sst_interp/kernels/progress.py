"""Progress for a terminal and for a log: the one helper every progress bar of the package goes through (issue 58).

On a terminal, :func:`progress` is a tqdm bar, redrawn in place. Off one (output redirected to a log file, a CI
job, a notebook), tqdm's redraws are carriage returns inside one line that grows with every update (20 KB in the
demo's log), so there it is a :class:`LineProgress`: one plain line each time the count reaches the next tenth of
the total and, between those, one at most every :data:`HEARTBEAT_S` seconds while the count moves (a slow job, or
one without a known total), each line at most :data:`MAX_LINE_CHARS` characters. Whether the stream is a terminal
(:func:`is_terminal`) and the clock are arguments, so the tests need neither a terminal nor the time.

The libraries draw bars of their own while a model loads (transformers' weights, the GGUF tensors, the hub's
downloads): off a terminal, every command runs with them switched off (:func:`quiet_library_bars`, applied by
:func:`~sst_interp.kernels.errors.cli_entry`).
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

if TYPE_CHECKING:
    from tqdm import tqdm

T = TypeVar("T")

#: Lines a redirected bar prints for its whole count: one per tenth of the total.
STEPS = 10
#: Seconds after which a redirected bar prints a line even between two tenths, if its count moved.
HEARTBEAT_S = 10.0
#: The longest line a redirected bar prints (a long description or postfix is cut).
MAX_LINE_CHARS = 300
#: The libraries' own switches for their bars, set off a terminal unless the user set them: tqdm reads
#: ``TQDM_DISABLE`` (the GGUF loader's bar), huggingface_hub and transformers ``HF_HUB_DISABLE_PROGRESS_BARS``, each
#: when it is first imported.
LIBRARY_SWITCHES: Mapping[str, str] = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def is_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default ``sys.stderr``) is a terminal; a closed or detached stream is not."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def progress(iterable: Iterable[T] | None = None, *, total: int | None = None, desc: str = "", unit: str = "it",
             initial: int = 0, disable: bool = False, stream: TextIO | None = None, terminal: bool | None = None,
             clock: Callable[[], float] = time.monotonic) -> tqdm | LineProgress:
    """A progress bar over ``iterable`` (or updated by hand up to ``total``): tqdm on a terminal, a
    :class:`LineProgress` off one (see the module docstring).

    Both support what the package uses: iteration, ``update(n)``, ``set_postfix_str``, ``set_postfix``, ``close``
    and ``with``. ``stream`` defaults to ``sys.stderr``; ``terminal`` to :func:`is_terminal` of it; ``clock``
    (seconds) is for tests.
    """
    stream = sys.stderr if stream is None else stream
    if is_terminal(stream) if terminal is None else terminal:
        # imported here: tqdm costs a tenth of a second, and every command's entry (cli_entry) imports this module
        from tqdm import tqdm

        return tqdm(iterable, total=total, desc=desc, unit=unit, initial=initial, disable=disable, file=stream)
    return LineProgress(iterable, total=total, desc=desc, unit=unit, initial=initial, disable=disable,
                        stream=stream, clock=clock)


def _duration(seconds: float) -> str:
    """``7 s``, ``3 min 05 s``, ``2 h 04 min`` (to the nearest second, halves up)."""
    seconds = max(0, math.floor(seconds + 0.5))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class LineProgress:
    """A progress bar for a log: plain lines, never a carriage return (see the module docstring).

    A line reads ``record: 24/48 q (50%), depth 2 [1 min 03 s, about 1 min 03 s left]``: the description, the
    count (of the total when known), the postfix, the time since the bar was made and, once the count moved, the
    time left at the rate so far. A bar that resumes (``initial`` > 0) counts its tenths and its rate from there.
    """

    def __init__(self, iterable: Iterable[T] | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "it", initial: int = 0, disable: bool = False, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.n = self.initial = initial
        self.disable = disable
        self.stream = sys.stderr if stream is None else stream
        self.clock = clock
        self.postfix = ""
        self.started = self.last_line_at = clock()
        self.shown = initial  # the count the last line showed
        self.step = self._step(initial)
        self.closed = False

    def _step(self, n: int) -> int:
        """The tenth of the total that ``n`` has reached (0 without a known, positive total)."""
        if not self.total or self.total <= 0:
            return 0
        return min(STEPS, math.floor(STEPS * n / self.total))

    def update(self, n: int = 1) -> None:
        """Count ``n`` more; print a line at the next tenth, or after :data:`HEARTBEAT_S` since the last line."""
        self.n += n
        if self.disable or self.closed:
            return
        now = self.clock()
        step = self._step(self.n)
        if step > self.step or (now - self.last_line_at >= HEARTBEAT_S and self.n != self.shown):
            self.step = max(step, self.step)
            self._print(now)

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        """The text after the count on the next line (nothing is printed now)."""
        self.postfix = str(s)

    def set_postfix(self, ordered_dict: Mapping[str, Any] | None = None, refresh: bool = True,
                    **kwargs: Any) -> None:
        """``key=value, ...`` after the count on the next line, as tqdm shows it (nothing is printed now)."""
        items = {**(ordered_dict or {}), **kwargs}
        self.postfix = ", ".join(f"{key}={value}" for key, value in items.items())

    def line(self, now: float) -> str:
        """The line for the count now (cut to :data:`MAX_LINE_CHARS`)."""
        head = f"{self.desc}: " if self.desc else ""
        if self.total:
            count = f"{self.n}/{self.total} {self.unit} ({100 * self.n // self.total}%)"
        else:
            count = f"{self.n} {self.unit}"
        elapsed = now - self.started
        times = _duration(elapsed)
        done = self.n - self.initial
        if self.total and done > 0 and self.n < self.total:
            times += f", about {_duration(elapsed / done * (self.total - self.n))} left"
        text = f"{head}{count}{', ' + self.postfix if self.postfix else ''} [{times}]"
        return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 3] + "..."

    def _print(self, now: float) -> None:
        self.stream.write(self.line(now) + "\n")
        self.stream.flush()
        self.shown, self.last_line_at = self.n, now

    def close(self) -> None:
        """A last line if the count moved since the previous one; later updates print nothing."""
        if self.closed:
            return
        self.closed = True
        if not self.disable and self.n != self.shown:
            self._print(self.clock())

    def __iter__(self) -> Iterator[T]:
        if self.iterable is None:
            raise TypeError("this progress bar has no iterable; call update() instead")
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def quiet_library_bars(stream: TextIO | None = None,
                       environ: MutableMapping[str, str] | None = None) -> Iterator[bool]:
    """Off a terminal, the libraries' own progress bars are off inside the block: :data:`LIBRARY_SWITCHES` are set
    in ``environ`` (default ``os.environ``) unless the user set them, and put back as they were afterwards. Yields
    whether it switched anything off.

    The switches are read when each library is first imported, which a command does only after parsing its flags:
    so this wraps a command's ``main``. On a terminal the bars stay.
    """
    environ = os.environ if environ is None else environ
    switched = {} if is_terminal(stream) else {name: value for name, value in LIBRARY_SWITCHES.items()
                                               if name not in environ}
    environ.update(switched)
    try:
        yield bool(switched)
    finally:
        for name in switched:
            environ.pop(name, None)
