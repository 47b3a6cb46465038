"""The explorer's library configuration, and the one declaration of ``python -m sst_interp.explore``'s arguments."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sst_interp.kernels.fields import arg, setting

#: Where the explorer listens unless told otherwise: this machine only.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


@dataclass(frozen=True)
class ExploreConfig:
    """What to explore and where to serve it; each field but ``fit_gmm`` is the ``explore`` argument or flag of the
    same name (``_`` -> ``-``), declared here once with its help (:mod:`sst_interp.cli.explore` builds the parser
    from it)."""

    run: Path = arg(positional=True, help="a run directory (the --out of a record run)")
    baseline: Path | None = arg(None, help="a matched baseline run: overthinks and recoveries are counted against it "
                                           "(default: against the run's smallest flat depth)")
    probe: Path | None = arg(None, help="a saved halting probe (probe train's folder or file) for the halting view")
    dictionary: Path | None = arg(None, help="a sparse dictionary folder (python -m sst_interp.features train) for "
                                             "the features view")
    report: Path | None = arg(None, help="the report folder (python -m sst_interp.report --out) to link artefacts from")
    host: str = arg(DEFAULT_HOST, help="interface to bind (default 127.0.0.1: this machine only)")
    port: int = arg(DEFAULT_PORT, help="TCP port (0 picks a free one)")
    top_n: int = arg(10, help="tokens shown per iteration in the hover and the logit lens")
    fit_gmm: bool = setting(True, help="fit the run's own low-overlap threshold (its GMM crossover; a child process "
                                       "makes one pass over the hidden window) for the regime mark; False: the "
                                       "paper's 0.976 throughout")
