"""Sweep per-position depth policies over thresholds on a fixed-depth run, beside the runs recorded live (the
library behind ``python -m sst_interp.probe policies``).

For every rule asked for, thresholds are put at quantiles of the rule's recorded values (between two recorded
values, never on one), each threshold is replayed on the fixed-depth run
(:mod:`sst_interp.analyses.depth_policies`: accuracy bounds from the questions the replay reproduces exactly, mean
iterations on the full-depth trajectory), and the runs recorded under policies add their measured rows. Everything
is validated before anything is computed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from sst_interp.analyses import depth_policies as dp
from sst_interp.errors import UsageError
from sst_interp.model.halting import PositionPolicy, parse_position_policy
from sst_interp.store import Run


@dataclass(frozen=True)
class LiveRun:
    """A run recorded under a policy (or at fixed depths) and, when measured, its wall time in seconds."""

    path: Path
    wall_s: float | None = None


@dataclass(frozen=True)
class SweepConfig:
    """What to sweep.

    Args:
        run: a run recorded at fixed depth (the policies' ``max``) with per-iteration logits.
        rules: rules to sweep over thresholds (empty: every rule the run can replay).
        quantiles: where the thresholds go among each rule's recorded values, each in (0, 1).
        policies: further policy strings replayed as written (their ``max`` at most the run's depth).
        live: runs whose measured rows join the table.
        run_wall_s: the fixed-depth run's wall time, when it holds one depth and it was measured.
    """

    run: Path
    rules: tuple[str, ...] = ()
    quantiles: tuple[float, ...] = dp.QUANTILES
    policies: tuple[str, ...] = ()
    live: tuple[LiveRun, ...] = field(default_factory=tuple)
    run_wall_s: float | None = None


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


def _check_flags(config: SweepConfig) -> None:
    """What can be refused without opening the run: rule names, quantiles, policy strings."""
    for rule in config.rules:
        if rule == "probe-pos":
            raise UsageError("probe-pos cannot be swept over thresholds; replay a probe with "
                             "python -m sst_interp.probe.position_sim --policy probe-pos:PATH")
        if rule not in dp.SWEEPABLE:
            raise UsageError(f"--rules: unknown rule {rule!r}; use {', '.join(dp.SWEEPABLE)}")
    for q in config.quantiles:
        if not 0.0 < q < 1.0:
            raise UsageError(f"--quantiles must lie strictly between 0 and 1, got {q}")
    for text in config.policies:
        policy = parse_position_policy(text, 1)
        if policy.probe_path is not None:
            raise UsageError(f"--policy {text}: probe-pos is replayed by python -m sst_interp.probe.position_sim")


def _check(config: SweepConfig, run: Run) -> tuple[list[str], list[PositionPolicy]]:
    reason = dp.fixed_run_reason(run.manifest)
    if reason is not None:
        raise UsageError(f"{config.run}: {reason}")
    depth = max(run.depths)
    can = dp.sweepable_rules(run.manifest)
    rules = list(config.rules) or [r for r in dp.SWEEPABLE if can[r] is None]
    for rule in rules:
        if can[rule] is not None:
            raise UsageError(f"--rules {rule}: cannot replay it on {config.run}: {can[rule]}")
    if not rules:
        raise UsageError(f"{config.run}: no rule can be replayed on this run")
    policies = [parse_position_policy(text, depth) for text in config.policies]
    for text, policy in zip(config.policies, policies):
        if policy.max_depth > depth:
            raise UsageError(f"--policy {text}: max={policy.max_depth} exceeds the run's depth {depth}")
        for name, _ in policy.rules:
            if can[name] is not None:
                raise UsageError(f"--policy {text}: {can[name]}")
    return rules, policies


def sweep(config: SweepConfig) -> dp.ParetoResult:
    """The Pareto rows: the fixed-depth run's flat depths, staged oracle and swept rules, the explicit policies,
    and every live run's rows (:mod:`sst_interp.analyses.depth_policies`)."""
    _check_flags(config)
    run = Run.open(config.run)
    rules, policies = _check(config, run)
    live = [(item, Run.open(item.path)) for item in config.live]  # every run opens before anything is computed
    extra = [name for policy in policies for name, _ in policy.rules if name not in rules]
    traj = dp.collect_trajectories(run, [*rules, *dict.fromkeys(extra)])
    swept = dp.default_policies(traj, rules, config.quantiles)
    rows = dp.live_rows(run, run.path.name, config.run_wall_s)
    rows += dp.simulated_rows(run, run.path.name, traj, [*swept, *policies])
    results = [dp.ParetoResult(dp.mark_pareto(_frame(rows)), (
        "simulated rows: accuracy bounds from the questions the replay reproduces exactly; mean iterations on "
        "the full-depth trajectory (an estimate)",))]
    for item, other in live:
        results.append(dp.ParetoResult(_frame(dp.live_rows(other, other.path.name, item.wall_s))))
    return dp.combine(results)


def _frame(rows: Sequence[dict]) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=list(dp.PARETO_COLUMNS))
