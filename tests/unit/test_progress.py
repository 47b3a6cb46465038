"""Progress bars for a terminal, plain lines for a log (issue 58 item 4): :mod:`sst_interp.kernels.progress`.

Whether the stream is a terminal and the clock are given to the helper, so nothing here needs a terminal or
depends on the time. The end-to-end check (a redirected command's log has no carriage return and no line over
1 KB) is in tests/unit/test_console_scripts.py, on every command's tiny run.
"""

from __future__ import annotations

import ast
import io
import itertools
from pathlib import Path

import pytest

from sst_interp.kernels.progress import (
    HEARTBEAT_S,
    LIBRARY_SWITCHES,
    MAX_LINE_CHARS,
    LineProgress,
    is_terminal,
    progress,
    quiet_library_bars,
)

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    """A clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def redirected(**kwargs) -> tuple[LineProgress, io.StringIO, Clock]:
    stream, clock = io.StringIO(), Clock()
    bar = progress(stream=stream, terminal=False, clock=clock, **kwargs)
    assert isinstance(bar, LineProgress)
    return bar, stream, clock


def test_a_redirected_bar_prints_a_line_per_tenth_not_per_update():
    bar, stream, _ = redirected(total=1000, desc="record", unit="q")
    with bar:
        for _ in range(1000):
            bar.update(1)
    text = stream.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == 10  # 10%, 20%, ..., 100%: the close adds nothing, the count did not move since
    assert lines[0] == "record: 100/1000 q (10%) [0 s, about 0 s left]"
    assert lines[-1] == "record: 1000/1000 q (100%) [0 s]"


def test_the_lines_state_the_time_so_far_and_the_time_left_at_that_rate():
    bar, stream, clock = redirected(total=10, desc="train", unit="step")
    bar.set_postfix(loss="0.5000", val="-")
    for _ in range(4):
        clock.now += 1.5  # below the heartbeat: only the tenths print
        bar.update(1)
    bar.close()
    assert stream.getvalue().splitlines() == [
        "train: 1/10 step (10%), loss=0.5000, val=- [2 s, about 14 s left]",
        "train: 2/10 step (20%), loss=0.5000, val=- [3 s, about 12 s left]",
        "train: 3/10 step (30%), loss=0.5000, val=- [5 s, about 11 s left]",
        "train: 4/10 step (40%), loss=0.5000, val=- [6 s, about 9 s left]"]


def test_between_tenths_a_line_comes_only_after_the_heartbeat_and_only_if_the_count_moved():
    bar, stream, clock = redirected(desc="trace", unit="cell")  # no total: no tenths, only the heartbeat
    for _ in range(25):
        clock.now += HEARTBEAT_S / 4
        bar.update(1)
    clock.now += 10 * HEARTBEAT_S  # a long wait without an update prints nothing
    bar.close()
    assert stream.getvalue().splitlines() == ["trace: 4 cell [10 s]", "trace: 8 cell [20 s]", "trace: 12 cell [30 s]",
                                              "trace: 16 cell [40 s]", "trace: 20 cell [50 s]",
                                              "trace: 24 cell [1 min 00 s]", "trace: 25 cell [2 min 43 s]"]


def test_a_large_update_prints_one_line_and_a_resumed_bar_counts_from_where_it_resumed():
    bar, stream, clock = redirected(total=100, initial=50, desc="record", unit="q")
    clock.now = 5.0
    bar.update(30)  # 50 -> 80: one line, not three
    bar.set_postfix_str("depth 2")
    clock.now = 10.0
    bar.update(20)
    bar.close()
    assert stream.getvalue().splitlines() == ["record: 80/100 q (80%) [5 s, about 3 s left]",
                                              "record: 100/100 q (100%), depth 2 [10 s]"]


def test_iterating_yields_every_item_and_ends_with_the_full_count():
    stream = io.StringIO()
    items = list(progress(iter(range(7)), total=7, desc="hops patching", unit="question", stream=stream,
                          terminal=False, clock=Clock()))
    assert items == list(range(7))
    assert stream.getvalue().splitlines()[-1] == "hops patching: 7/7 question (100%) [0 s]"
    stream = io.StringIO()
    assert list(progress(["a", "b"], stream=stream, terminal=False, clock=Clock())) == ["a", "b"]  # total from len
    assert stream.getvalue().splitlines() == ["1/2 it (50%) [0 s, about 0 s left]", "2/2 it (100%) [0 s]"]


def test_a_disabled_bar_prints_nothing_and_a_long_line_is_cut():
    bar, stream, _ = redirected(total=3, disable=True)
    for _ in range(3):
        bar.update(1)
    bar.close()
    assert stream.getvalue() == ""
    bar, stream, _ = redirected(total=2, desc="record (rank 0 of 2)")
    bar.set_postfix_str("x" * 5000)
    bar.update(2)
    (line,) = stream.getvalue().splitlines()
    assert len(line) == MAX_LINE_CHARS and line.startswith("record (rank 0 of 2): 2/2 it (100%), xxx") \
        and line.endswith("...")


def test_a_terminal_gets_tqdm():
    from tqdm import tqdm

    stream = io.StringIO()
    with progress(total=3, desc="record", unit="q", stream=stream, terminal=True) as bar:
        assert isinstance(bar, tqdm)
        bar.update(3)
    assert "\r" in stream.getvalue() and "3/3" in stream.getvalue()


def test_only_a_terminal_is_a_terminal():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    closed = io.StringIO()
    closed.close()  # isatty() on a closed stream raises ValueError
    assert is_terminal(Tty()) and not is_terminal(io.StringIO()) and not is_terminal(closed)
    assert not is_terminal(object())  # no isatty at all
    with progress(total=1, stream=Tty()) as bar:
        assert not isinstance(bar, LineProgress)  # tqdm, as on a terminal
    with progress(total=1, stream=io.StringIO()) as bar:
        assert isinstance(bar, LineProgress)


def test_off_a_terminal_the_libraries_bars_are_off_inside_the_block_only():
    environ = {"PATH": "/bin"}
    with quiet_library_bars(io.StringIO(), environ) as switched:
        assert switched and environ == {"PATH": "/bin", **LIBRARY_SWITCHES}
    assert environ == {"PATH": "/bin"}
    environ = {"TQDM_DISABLE": "0"}  # the user's setting stands, and stays after the block
    with quiet_library_bars(io.StringIO(), environ):
        assert environ == {"TQDM_DISABLE": "0", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    assert environ == {"TQDM_DISABLE": "0"}

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    environ = {}
    with quiet_library_bars(Tty(), environ) as switched:
        assert not switched and environ == {}


def test_every_progress_bar_of_the_package_goes_through_the_helper():
    """No module but the helper makes a tqdm bar."""
    users = set()
    for path in itertools.chain(*(sorted((ROOT / folder).rglob("*.py")) for folder in ("sst_interp", "hooks",
                                                                                       "analyses"))):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(name.split(".")[0] == "tqdm" for name in names):
                users.add(path.relative_to(ROOT).as_posix())
    assert users == {"sst_interp/kernels/progress.py"}


@pytest.mark.parametrize("total, updates, most", [(1000, 1000, 11), (48, 48, 11), (7, 7, 11), (100_000, 100_000, 11)])
def test_a_redirected_bar_stays_within_eleven_lines_whatever_the_count(total, updates, most):
    bar, stream, _ = redirected(total=total, desc="record", unit="q")
    for _ in range(updates):
        bar.set_postfix_str("depth 1")
        bar.update(1)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) <= most and all(len(line) <= MAX_LINE_CHARS for line in lines)
