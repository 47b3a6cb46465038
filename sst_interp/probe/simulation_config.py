"""What an offline per-position policy simulation is asked to do (:class:`PositionSimConfig`), in a module without
torch: it is also the one declaration of the ``python -m sst_interp.probe.position_sim`` flags, which ``--help``
shows at once. The simulation itself is :func:`sst_interp.probe.policy_simulation.simulate_policies`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sst_interp.kernels.fields import arg


@dataclass(frozen=True)
class PositionSimConfig:
    """Policies to simulate on one fixed-depth run; one flag per field."""

    run: Path = arg(help="run directory recorded at fixed depth max")
    policy: list[str] = arg(repeat=True, metavar="POLICY",
                            help="policy string, e.g. kl:0.01,max=4 (repeatable; max defaults to the run's deepest)")
    out: Path | None = arg(None, help="write the per-(question, turn) table to this CSV")
