"""What the report is asked to do: :class:`ReportConfig`, the one declaration of the ``report`` command's flags.
The inputs it resolves to, and the rules, are :mod:`sst_interp.reporting.inputs`'s (imported once the flags are
parsed: it opens runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sst_interp.kernels.fields import Flags, arg


def _progress(flags: _Quiet) -> bool:
    return not flags.quiet


@dataclass(frozen=True)
class _Quiet:
    """How ``progress`` is typed on the command line: ``--quiet`` turns it off."""

    quiet: bool = arg(False, help="no progress lines")


@dataclass(frozen=True)
class ReportConfig:
    """Options of one report, and the one declaration of the ``report`` command's flags (each field's default and
    help text; :mod:`sst_interp.cli.report` builds the parser from it). The repeated flags are named in the
    singular (``runs`` is ``--run``), ``progress`` is typed as ``--quiet``. ``checkpoint`` and ``training_logs``
    also take a named checkpoint (demo-codeact, ...), resolved by :func:`~sst_interp.reporting.inputs.resolve_inputs`."""

    runs: tuple[Path, ...] = arg((), flag="run", repeat=True,
                                 help="run directory or a folder of runs (repeatable; default: the most recent under "
                                      "--runs-root)")
    baselines: tuple[Path, ...] = arg((), flag="baseline", repeat=True,
                                      help="matched-baseline run directory (repeatable; paired by shared questions)")
    probe: Path | None = arg(None, help="saved halting probe (default: train one on each run with MUST HALT labels)")
    dictionary: Path | None = arg(None, help="sparse dictionary folder (python -m sst_interp.features train) for the "
                                             "feature measurements (default: they are skipped)")
    checkpoint: Path | None = arg(None, help="SST checkpoint folder or name (demo-codeact) for the alpha figures "
                                             "(default: the one the run's manifest names)")
    training_logs: tuple[Path, ...] = arg((), flag="training_log", repeat=True,
                                          help="training output folder, train_log.csv or named checkpoint "
                                               "(demo-codeact, demo-codeact-baseline) (repeatable: the SST's and "
                                               "the baseline's)")
    out: Path = arg(Path("reports"), help="output folder")
    only: tuple[str, ...] = arg((), metavar="NAME,...",
                                help="comma-separated artefact names or globs to produce (default: all)")
    runs_root: Path = arg(Path("runs"), help="where to look for the most recent run when no --run is given")
    experiments: tuple[Path, ...] = arg((), flag="experiment", repeat=True,
                                        help="intervention experiment folder (python -m sst_interp.intervene ... "
                                             "--out), repeatable: its tables and heatmaps join the report")
    external: str | None = arg(None, metavar="FILE.csv",
                               help="published accuracies (columns model, parameters, accuracy, prompting, source) "
                                    "to place the run's staged accuracy among, or a shipped name: gsm8k, gpqa (the "
                                    "figures the paper cites); without it the external comparisons are skipped")
    progress: bool = arg(True, flags=Flags(_Quiet, _progress),
                         help="print one line per artefact to stderr (--quiet)")


