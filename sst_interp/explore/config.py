"""The explorer's library configuration (what ``python -m sst_interp.explore`` turns its flags into)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: Where the explorer listens unless told otherwise: this machine only.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


@dataclass(frozen=True)
class ExploreConfig:
    """What to explore and where to serve it.

    Args:
        run: the run directory (the ``--out`` of a record run).
        baseline: a matched baseline run, for overthinks and recoveries against it (default: against the run's
            smallest flat depth).
        probe: a saved halting probe (``probe train``'s folder or file), for the halting view.
        report: a folder written by ``python -m sst_interp.report`` for this run, whose artefacts are linked.
        host: interface to bind (127.0.0.1: reachable from this machine only).
        port: TCP port (0: any free port).
        top_n: how many tokens the hover and the logit lens show per iteration.
        fit_gmm: fit the run's own low-overlap threshold (its GMM crossover; a child process makes one pass over
            the hidden window) for the regime mark; False: the paper's 0.976 throughout.
    """

    run: Path
    baseline: Path | None = None
    probe: Path | None = None
    report: Path | None = None
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    top_n: int = 10
    fit_gmm: bool = True
