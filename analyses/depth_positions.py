"""Where each policy stops at every position, by regime, and the histogram of those stops.

:func:`policy_positions` replays policies (:mod:`sst_interp.analyses.depth_replay`) on a run's trajectories and
labels each position low-overlap (a basin shift between iteration 1 and ``max``, the paper's regime labels at the
run's GMM crossover), stable or unlabelled, beside the iteration at which L2 convergence monitoring would stop;
:func:`iteration_histogram` counts the stops per rule and regime. The agreement of the two stopping points is
:mod:`sst_interp.analyses.depth_agreement`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from sst_interp.analyses.depth_replay import convergence_iterations, halting_iterations
from sst_interp.analyses.depth_trajectories import Trajectories


@dataclass(frozen=True)
class PolicyPositions:
    """Each chosen policy's stopping iteration at every position of the recorded trajectory.

    Args:
        positions: one row per (policy, position): ``rule``, ``policy``, ``question_id``, ``turn``, ``position``,
            ``iterations`` (where the rule stops), ``converged`` (where the L2 change falls below the threshold),
            ``regime`` (``low_overlap``, ``stable`` or ``unlabelled``).
        l2_threshold: the convergence threshold (the median L2 change).
        depth: the run's depth (max).
    """

    positions: pd.DataFrame
    l2_threshold: float
    depth: int
    layer: int


def policy_positions(traj: Trajectories, policies: Sequence[Any], labels: pd.DataFrame | None) -> PolicyPositions:
    """:class:`PolicyPositions` for ``policies`` with regimes from a regime label table
    (:func:`sst_interp.analyses.logit_dynamics.labels_from_run`: key ``(depth, 1, depth)``)."""
    converged, threshold = convergence_iterations(traj)
    regime = pd.Series("unlabelled", index=traj.index.index, dtype=object)
    if labels is not None and not labels.empty:
        key = labels[(labels["depth"] == traj.depth) & (labels["iter_a"] == 1) & (labels["iter_b"] == traj.depth)]
        lookup = {(str(q), int(t), int(p)): bool(v) for q, t, p, v in
                  zip(key["question_id"], key["turn"], key["position"], key["low_overlap"])}
        regime = pd.Series([{True: "low_overlap", False: "stable"}.get(lookup.get((q, t, p)), "unlabelled")
                            for q, t, p in zip(traj.index["question_id"], traj.index["turn"], traj.index["position"])],
                           index=traj.index.index, dtype=object)
    frames = []
    for policy in policies:
        rule = policy.rules[0][0]
        frames.append(traj.index[["question_id", "turn", "position"]].assign(
            rule=rule, policy=policy.describe(), iterations=halting_iterations(traj, policy), converged=converged,
            regime=regime.to_numpy()))
    columns = ["rule", "policy", "question_id", "turn", "position", "iterations", "converged", "regime"]
    frame = pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)
    return PolicyPositions(frame, threshold, traj.depth, traj.layer)


def iteration_histogram(pp: PolicyPositions) -> pd.DataFrame:
    """Per (rule, policy, regime, iterations): ``positions`` and ``fraction`` (of that rule's positions in the
    regime); positions where the rule has no recorded values are left out."""
    known = pp.positions[pp.positions["iterations"] > 0]
    counts = known.groupby(["rule", "policy", "regime", "iterations"]).size().rename("positions").reset_index()
    totals = counts.groupby(["rule", "regime"])["positions"].transform("sum")
    counts["fraction"] = counts["positions"] / totals
    return counts
