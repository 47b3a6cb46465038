"""Halting rules replayed on recorded trajectories: where each policy would stop, and which questions that reproduces.

On a run recorded at fixed depth ``max`` a rule's decision at a position is read from the recorded iterations of
that position (:func:`halting_iterations`, the live comparison of :mod:`sst_interp.model.halting`), beside where L2
convergence monitoring would stop (:func:`convergence_iterations`). The decision is the live one only until the
first early exit; :func:`exact_questions` says which questions the replay reproduces whole. The thresholds a sweep
tries sit at quantiles of each rule's recorded values (:func:`sweep_thresholds`, :func:`default_policies`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.analyses.depth_trajectories import Trajectories
from sst_interp.kernels.errors import UsageError


#: Default quantiles of each rule's recorded values at which the sweep puts its thresholds.
QUANTILES: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75, 0.9)


def halting_iterations(traj: Trajectories, policy: Any) -> np.ndarray:
    """[N] int64: the iteration (1-based) at which ``policy`` (a
    :class:`~sst_interp.model.halting.PositionPolicy` whose ``max_depth`` is at most the run's depth) stops at
    each position of the recorded trajectory; -1 where a rule it uses has no recorded values there."""
    from sst_interp.model.halting import rule_fires

    if policy.probe_path is not None:
        raise UsageError("probe-pos cannot be replayed by the sweep; use python -m sst_interp.probe.position_sim")
    k = int(policy.max_depth)
    if k > traj.depth:
        raise UsageError(f"max={k} exceeds the run's depth {traj.depth}")
    n = len(traj.index)
    fired = np.zeros((n, k), dtype=bool)
    unknown = np.zeros(n, dtype=bool)
    for name, tau in policy.rules:
        if name not in traj.values:
            raise UsageError(f"rule {name} was not read from this run (read: {', '.join(traj.values) or 'none'})")
        v = traj.values[name][:, :k]
        first = 1 if name in ("kl", "state") else 0
        if k > first:
            unknown |= np.isnan(v[:, first:]).all(axis=1)
        with np.errstate(invalid="ignore"):
            fired |= np.asarray(rule_fires(name, tau, v), dtype=bool) & ~np.isnan(v)  # the live comparison
    fired[:, :policy.min_depth - 1] = False
    fired[:, k - 1] = True
    halt = fired.argmax(axis=1).astype(np.int64) + 1
    halt[unknown] = -1
    return halt


def convergence_iterations(traj: Trajectories, max_depth: int | None = None,
                           threshold: float | None = None) -> tuple[np.ndarray, float]:
    """([N] int64, threshold): the first iteration i >= 2 whose L2 change ``||h_i - h_{i-1}||`` is below
    ``threshold`` (default: the median over every recorded change up to ``max_depth``), ``max_depth`` when none is;
    -1 where no hidden state is recorded."""
    k = traj.depth if max_depth is None else int(max_depth)
    l2 = traj.l2[:, :k]
    known = ~np.isnan(l2[:, 1:]).all(axis=1) if k > 1 else np.zeros(len(l2), dtype=bool)
    if threshold is None:
        finite = l2[:, 1:][~np.isnan(l2[:, 1:])]
        threshold = float(np.median(finite)) if finite.size else float("nan")
    below = l2 < threshold  # NaN compares False
    below[:, k - 1] = True
    out = below.argmax(axis=1).astype(np.int64) + 1
    out[~known] = -1
    return out, float(threshold)


def exact_questions(traj: Trajectories, halt: np.ndarray) -> pd.Series:
    """question_id -> bool: whether the simulation of :mod:`sst_interp.probe.policy_simulation` reproduces the
    question's every turn (the live run is then the full-depth run, up to a last-token exit that keeps its token).

    The simulation walks each turn's positions in order and stops at the first one that is unknown (``window``) or
    exits early. An early exit at a turn's last token that emits the full-depth token (or hits the token budget)
    keeps the turn exact, but a later turn then reads a KV entry the recording lacks (``upstream``)."""
    k = int(traj.depth)
    frame = traj.index.assign(halt=halt, early=(halt >= 1) & (halt < k), unknown=halt < 0)
    tokens = traj.argmax[np.arange(len(halt)), np.clip(halt, 1, None) - 1]
    frame["same_token"] = tokens == frame["token"].to_numpy()
    out: dict[str, bool] = {}
    for qid, rows in frame.groupby("question_id", sort=False):
        ok = True
        turns = list(rows.groupby("turn", sort=True))
        for t, (_, turn) in enumerate(turns):
            turn = turn.sort_values("position")
            stops = turn[turn["unknown"] | turn["early"]]
            if stops.empty:
                continue
            first = stops.iloc[0]
            last = int(first["position"]) == int(first["n_tokens"]) - 1
            if first["unknown"] or not last or not (first["same_token"] or first["cut_by_budget"]):
                ok = False
                break
            if t < len(turns) - 1:  # the next turn's prefill reads the early exit's KV entry
                ok = False
                break
        out[str(qid)] = ok
    return pd.Series(out, dtype=bool)


def sweep_thresholds(traj: Trajectories, rule: str, quantiles: Sequence[float] = QUANTILES,
                     max_depth: int | None = None) -> list[float]:
    """Thresholds for ``rule`` at ``quantiles`` of its recorded values (iterations that can fire, up to
    ``max_depth - 1``), each moved to the midpoint between the quantile's value and the next larger recorded value,
    so that no threshold equals a recorded value (a strict comparison on a tie would decide by float rounding)."""
    k = traj.depth if max_depth is None else int(max_depth)
    first = 1 if rule in ("kl", "state") else 0
    v = traj.values[rule][:, first:k - 1]
    v = np.unique(v[np.isfinite(v)])
    if v.size == 0:
        return []
    out: list[float] = []
    for q in quantiles:
        if not 0.0 < q < 1.0:
            raise UsageError(f"quantiles must lie strictly between 0 and 1, got {q}")
        at = int(np.searchsorted(v, np.quantile(v, q), side="left"))
        at = min(at, v.size - 1)
        tau = float((v[at] + v[at + 1]) / 2) if at + 1 < v.size else float(v[at]) * (1 + 1e-9) + 1e-12
        if tau not in out:
            out.append(tau)
    return out


def default_policies(traj: Trajectories, rules: Sequence[str] | None = None,
                     quantiles: Sequence[float] = QUANTILES) -> list[Any]:
    """``rule:tau,max=depth`` for every read rule (or ``rules``) at :func:`sweep_thresholds`."""
    from sst_interp.model.halting import parse_position_policy

    out = []
    for rule in (rules if rules is not None else list(traj.values)):
        for tau in sweep_thresholds(traj, rule, quantiles):
            out.append(parse_position_policy(f"{rule}:{tau!r},max={traj.depth}", traj.depth))
    return out


def median_policies(traj: Trajectories) -> list[Any]:
    """Each read rule at the median of its recorded values (the sweep's middle threshold), max = the run's depth."""
    return default_policies(traj, quantiles=(0.5,))


def short_name(policy: Any) -> str:
    """A policy's rules with 6-digit thresholds and its bounds when they are not the defaults (figure labels)."""
    parts = [f"{name}:{tau:.6g}" for name, tau in policy.rules]  # 6 digits: margins crowd just below 1
    if policy.probe_path is not None:
        parts.append("probe-pos")
    if policy.min_iterations != 1:
        parts.append(f"min={policy.min_iterations}")
    return ",".join(parts)
