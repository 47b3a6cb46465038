"""The run the explorer shows: opened once, re-opened when a recording commits more, read one question at a time.

Only the run's small tables (questions, generations, episodes) are held in memory; shards are read per request
through :class:`~sst_interp.store.Run` (one question's row groups). A run still being recorded is re-opened when its
``manifest.json`` changes, so the explorer shows what has been committed so far.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from sst_interp.analyses.basin_profiles import low_overlap_threshold, punctuated_equilibrium
from sst_interp.explore.config import ExploreConfig
from sst_interp.explore.tokens import TokenText
from sst_interp.kernels.paper import PAPER_THRESHOLD
from sst_interp.store import Run
from sst_interp.store.manifest import MANIFEST_NAME


def completion_episodes(generations: pd.DataFrame) -> pd.DataFrame:
    """What :meth:`Run.episodes` returns for a run without ``episodes.parquet`` (each generation a one-turn
    episode), from a generations table already read: it saves reading the table a second time at start (0.4 s on a
    12 GB run). ``tests/unit/explore/test_server.py`` checks it equals ``Run.episodes()``."""
    gens = generations[generations["turn"] == 0]
    return pd.DataFrame({
        "question_id": gens["question_id"], "depth": gens["depth"], "n_turns": 1,
        "stop_reason": gens["stop_reason"], "final_answer": gens["extracted_answer"],
        "correct": gens["correct"], "grader": gens["grader"], "depth_policy": gens["depth_policy"],
        "chosen_depth": gens["chosen_depth"]}).reset_index(drop=True)


def fit_threshold(run_path: str, send: Connection) -> None:
    """Child process: send ``(threshold, where it came from)`` of the run's GMM fit, or ``(None, the reason)``."""

    try:
        value, source = low_overlap_threshold(punctuated_equilibrium(Run.open(run_path)))
        send.send((float(value), source))
    except Exception as err:  # noqa: BLE001 - any failure is reported to the page as the reason the fit is missing
        send.send((None, " ".join(str(err).split())))
    finally:
        send.close()


@dataclass(frozen=True)
class Threshold:
    """The low-overlap threshold shown in the position view.

    Args:
        value: the threshold on top-k overlap.
        source: where it came from ("this run's GMM crossover", or the paper's while the fit is computing or
            when the run has none).
        ready: the run's own fit has finished (or failed, see ``source``).
    """

    value: float
    source: str
    ready: bool


class RunSource:
    """One run (and its optional baseline), re-opened when the recording commits more.

    Args:
        config: the explorer's configuration.
    """

    def __init__(self, config: ExploreConfig) -> None:
        self.config = config
        self._lock = threading.RLock()
        self._stamp: tuple[int, int] | None = None
        self._run: Run | None = None
        self._tables: dict[str, pd.DataFrame] = {}
        self._blocks: OrderedDict[tuple, Any] = OrderedDict()
        self.baseline = Run.open(config.baseline) if config.baseline is not None else None
        self.run  # noqa: B018 - opens and validates now, so a bad path fails before the server starts
        self.tokens = TokenText(self.run.manifest)
        self._threshold: Threshold | None = None
        self._started = False

    def start_background(self) -> None:
        """Start, once, what loads in the background: the tokenizer (its lookup imports the model package) and the
        run's GMM fit. Called after the tables are read, so that neither competes with opening the run."""
        if self._started:
            return
        self._started = True
        self.tokens.start()
        if self.config.fit_gmm:
            threading.Thread(target=self._fit, name="explore-gmm", daemon=True).start()

    # ------------------------------------------------------------------------------------------ the run
    def _manifest_stamp(self) -> tuple[int, int]:
        stat = (Path(self.config.run) / MANIFEST_NAME).stat()
        return stat.st_mtime_ns, stat.st_size

    @property
    def run(self) -> Run:
        """The run as last committed (re-opened when ``manifest.json`` changed since the last request)."""
        with self._lock:
            try:
                stamp = self._manifest_stamp()
            except FileNotFoundError:
                stamp = None
            if self._run is None or stamp != self._stamp:
                self._run = Run.open(self.config.run)
                self._stamp = stamp
                self._tables.clear()
                self._blocks.clear()
            return self._run

    def table(self, name: str) -> pd.DataFrame:
        """``questions``, ``generations`` or ``episodes`` of the current run (read once per commit)."""
        run = self.run
        with self._lock:
            if name not in self._tables:
                if name == "episodes" and not (run.path / "episodes.parquet").exists():
                    self._tables[name] = completion_episodes(self.table("generations"))
                else:
                    self._tables[name] = getattr(run, name)()
            return self._tables[name]

    def block(self, key: tuple, read: Callable[[Run], Any]) -> Any:
        """``read(run)`` memoised under ``key`` for the last few requests (a hover re-reads no row group)."""
        run = self.run
        with self._lock:
            if key in self._blocks:
                self._blocks.move_to_end(key)
                return self._blocks[key]
        value = read(run)
        # Arrow's allocator keeps the pages a row group was decoded in (70 MB at the paper's shape) for its next
        # allocation; handed back, the server's memory is what it holds, not the largest read it ever made
        pa.default_memory_pool().release_unused()
        with self._lock:
            self._blocks[key] = value
            while len(self._blocks) > 16:
                self._blocks.popitem(last=False)
        return value

    # ------------------------------------------------------------------------------------------ threshold
    def _fit(self) -> None:
        """Fit the run's GMM in a child process (a full pass over the hidden window: it must not hold the server's
        GIL or memory), then publish its threshold. The child is a daemon: it dies with the server."""
        context = multiprocessing.get_context("spawn")  # never fork a process that runs threads
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=fit_threshold, args=(str(self.config.run), send), daemon=True,
                                name="explore-gmm")
        try:
            child.start()
        except RuntimeError as err:  # e.g. a calling script without a __main__ guard: the page says why
            self._threshold = Threshold(PAPER_THRESHOLD, "the paper's GMM crossover (the fit's process "
                                        f"could not start: {' '.join(str(err).split())[:160]})", True)
            return
        send.close()
        try:
            value, source = receive.recv()
        except EOFError:  # the child died without an answer (killed, out of memory)
            child.join(timeout=5)
            value, source = None, f"its process ended with exit code {child.exitcode} before answering"
        child.join(timeout=5)
        if value is None:
            self._threshold = Threshold(PAPER_THRESHOLD, f"the paper's GMM crossover (this run's fit "
                                        f"failed: {source})", True)
        else:
            self._threshold = Threshold(float(value), source, True)

    @property
    def threshold(self) -> Threshold:
        """The run's GMM crossover once fitted; the paper's until then."""
        if self._threshold is not None:
            return self._threshold
        return Threshold(PAPER_THRESHOLD, "the paper's GMM crossover (this run's fit is still computing)",
                         False)
