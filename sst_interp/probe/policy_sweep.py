"""Sweep per-position depth policies over thresholds on a fixed-depth run, beside the runs recorded live (the
library behind ``python -m sst_interp.probe policies``).

For every rule asked for, thresholds are put at quantiles of the rule's recorded values (between two recorded
values, never on one), each threshold is replayed on the fixed-depth run
(:mod:`sst_interp.analyses.depth_pareto`: accuracy bounds from the questions the replay reproduces exactly, mean
iterations on the full-depth trajectory), and the runs recorded under policies add their measured rows. Everything
is validated before anything is computed. What to sweep is a :class:`~sst_interp.probe.sweep_config.SweepConfig`
(also the ``policies`` command's flags).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from sst_interp.analyses.depth_pareto import (
    PARETO_COLUMNS,
    ParetoResult,
    combine,
    live_rows,
    mark_pareto,
    row_of,
    simulated_rows,
)
from sst_interp.analyses.depth_replay import default_policies
from sst_interp.analyses.depth_trajectories import collect_trajectories
from sst_interp.analyses.loop_manifest import SWEEPABLE, fixed_run_reason, sweepable_rules
from sst_interp.kernels.errors import UsageError
from sst_interp.model.halting import PositionPolicy, parse_position_policy
from sst_interp.probe.dataset import load_probe_data
from sst_interp.probe.evaluate import evaluate_probe
from sst_interp.probe.io import load_probe
from sst_interp.probe.sweep_config import SweepConfig
from sst_interp.store import Run


def probe_row(run: Run, name: str, path: Path) -> dict:
    """The per-turn halting probe replayed on a run with flat depths 1..k (Sec. 6, app:halting_eval): each question
    runs at the depth the probe picks at position 0 of its first turn. One question's answer is then its flat run
    at that depth, so the accuracy is exact for one-turn answers; a CodeACT episode keeps its first turn's choice
    here, where a live probe decides again at every turn (``basis`` says which). Mean iterations are
    token-weighted over the chosen depths' generations."""

    probe, meta = load_probe(path)
    outcome = evaluate_probe(probe, load_probe_data(run, meta.layer), meta.threshold).outcome
    gens = run.generations()
    tokens = gens.assign(n=gens["token_ids"].map(len)).groupby(["question_id", "depth"])["n"].sum()
    spent = total = 0
    for qid, depth in zip(outcome.question_ids, outcome.chosen_depth):
        n = int(tokens.get((qid, int(depth)), 0))
        spent, total = spent + int(depth) * n, total + n
    n_q = len(outcome.question_ids)
    acc = 100.0 * float(np.sum(outcome.final_correct)) / n_q if n_q else float("nan")
    multi_turn = run.manifest.get("protocol", "completion") == "codeact"
    basis = ("first turn's position-0 choice held for the episode" if multi_turn else
             "position-0 choice replayed on the flat runs (exact)")
    return row_of(run=name, condition="probe (per turn, replayed)", policy=f"probe:{path}", source="replayed",
                   n_questions=n_q, accuracy_pct=acc, accuracy_low_pct=acc, accuracy_high_pct=acc,
                   exact_questions=n_q, mean_iterations=spent / total if total else float("nan"), basis=basis)


def _check_flags(config: SweepConfig) -> None:
    """What can be refused without opening the run: rule names, quantiles, policy strings, a missing probe."""
    if config.probe is not None and not Path(config.probe).exists():
        raise UsageError(f"--probe {config.probe}: no such probe; train one with python -m sst_interp.probe train")
    for rule in config.rules:
        if rule == "probe-pos":
            raise UsageError("probe-pos cannot be swept over thresholds; replay a probe with "
                             "python -m sst_interp.probe.position_sim --policy probe-pos:PATH")
        if rule not in SWEEPABLE:
            raise UsageError(f"--rules: unknown rule {rule!r}; use {', '.join(SWEEPABLE)}")
    for q in config.quantiles:
        if not 0.0 < q < 1.0:
            raise UsageError(f"--quantiles must lie strictly between 0 and 1, got {q}")
    for text in config.policies:
        policy = parse_position_policy(text, 1)
        if policy.probe_path is not None:
            raise UsageError(f"--policy {text}: probe-pos is replayed by python -m sst_interp.probe.position_sim")


def _check(config: SweepConfig, run: Run) -> tuple[list[str], list[PositionPolicy]]:
    reason = fixed_run_reason(run.manifest)
    if reason is not None:
        raise UsageError(f"{config.run}: {reason}")
    depth = max(run.depths)
    can = sweepable_rules(run.manifest)
    rules = list(config.rules) or [r for r in SWEEPABLE if can[r] is None]
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


def sweep(config: SweepConfig) -> ParetoResult:
    """The Pareto rows: the fixed-depth run's flat depths, staged oracle and swept rules, the explicit policies,
    and every live run's rows (:mod:`sst_interp.analyses.depth_pareto`)."""
    _check_flags(config)
    run = Run.open(config.run)
    rules, policies = _check(config, run)
    live = [(item, Run.open(item.path)) for item in config.live]  # every run opens before anything is computed
    extra = [name for policy in policies for name, _ in policy.rules if name not in rules]
    traj = collect_trajectories(run, [*rules, *dict.fromkeys(extra)])
    swept = default_policies(traj, rules, config.quantiles)
    rows = live_rows(run, run.path.name, config.run_wall_s)
    rows += simulated_rows(run, run.path.name, traj, [*swept, *policies])
    if config.probe is not None:
        rows.append(probe_row(run, run.path.name, config.probe))
    results = [ParetoResult(mark_pareto(_frame(rows)), (
        "simulated rows: accuracy bounds from the questions the replay reproduces exactly; mean iterations on "
        "the full-depth trajectory (an estimate)",))]
    for item, other in live:
        results.append(ParetoResult(_frame(live_rows(other, other.path.name, item.wall_s))))
    return combine(results)


def _frame(rows: Sequence[dict]) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=list(PARETO_COLUMNS))
