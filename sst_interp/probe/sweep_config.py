"""What a per-position depth policy sweep is asked to do (:class:`SweepConfig`), in a module without torch or pandas:
it is also the one declaration of the ``python -m sst_interp.probe policies`` flags, which ``--help`` shows at once.
The sweep itself is :mod:`sst_interp.probe.policy_sweep`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.fields import Flags, arg

#: The default quantiles (sst_interp.analyses.depth_policies.QUANTILES, equal by test), written out here so that
#: the config's module loads no pandas.
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


@dataclass(frozen=True)
class LiveRun:
    """A run recorded under a policy (or at fixed depths) and, when measured, its wall time in seconds."""

    path: Path
    wall_s: float | None = None


def parse_live(text: str) -> LiveRun:
    """``RUN`` or ``RUN=SECONDS`` -> :class:`LiveRun` (a UsageError for a bad number)."""
    path, sep, seconds = text.rpartition("=")
    if not sep:
        return LiveRun(Path(text))
    try:
        wall = float(seconds)
    except ValueError:
        raise UsageError(f"--live {text!r}: expected RUN or RUN=SECONDS") from None
    if not wall >= 0:
        raise UsageError(f"--live {text!r}: the wall time must be >= 0 seconds")
    return LiveRun(Path(path), wall)


@dataclass(frozen=True)
class _Live:
    """How ``live`` is typed on the command line."""

    live: list[str] = arg(default_factory=list, repeat=True,
                          help="a run recorded under a policy, as RUN or RUN=SECONDS with its measured wall time "
                               "(repeatable)")


def _live_runs(flags: _Live) -> tuple[LiveRun, ...]:
    return tuple(parse_live(text) for text in flags.live)


@dataclass(frozen=True)
class SweepConfig:
    """What to sweep; one ``policies`` flag per field (``policies`` is the repeated ``--policy``, ``run_wall_s`` is
    ``--run-seconds``, ``live`` is typed as ``--live RUN[=SECONDS]``)."""

    run: Path = arg(help="run recorded at fixed depth max (e.g. --depths 1,4) with per-iteration logits")
    rules: tuple[str, ...] = arg((), help="rules to sweep: kl, entropy, margin, state (default: every rule the run "
                                          "can replay; kl needs --top-k = vocabulary)")
    quantiles: tuple[float, ...] = arg(QUANTILES, help="quantiles of each rule's recorded values where thresholds go "
                                                       "(each in (0, 1))")
    policies: tuple[str, ...] = arg((), flag="policy", repeat=True,
                                    help="a policy string replayed as written, e.g. state:0.05,max=4 (repeatable)")
    live: tuple[LiveRun, ...] = arg((), flags=Flags(_Live, _live_runs),
                                    help="runs whose measured rows join the table (--live)")
    run_wall_s: float | None = arg(None, flag="run_seconds",
                                   help="measured wall time of --run (shown when it holds one depth)")
    probe: Path | None = arg(None, help="a saved halting probe: add its per-turn choice replayed on --run (needs "
                                        "flat depths 1..k)")
