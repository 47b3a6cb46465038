"""Per-position trajectories of a fixed-depth run: what each halting rule would read at every recorded iteration.

:func:`collect_trajectories` reads, for every generated position at one depth, each replayable rule's value (the
number the live rule thresholds: :mod:`sst_interp.model.halting`), the token each iteration would emit and the L2
change of the loop state, into one :class:`Trajectories`. The replay (:mod:`sst_interp.analyses.depth_replay`), the
Pareto rows (:mod:`sst_interp.analyses.depth_pareto`) and the per-position measurements read it; which runs it can
read is :mod:`sst_interp.analyses.loop_manifest`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.analyses.loop_manifest import SWEEPABLE, fixed_run_reason, state_layer, sweepable_rules
from sst_interp.kernels.errors import UsageError


@dataclass(frozen=True)
class Trajectories:
    """Per-position quantities along every recorded iteration of a fixed-depth run.

    N = generated positions of every (question, turn) at depth ``depth``; I = ``depth``. Iteration ``i`` (1-based)
    is column ``i - 1``; a quantity that compares two iterations is NaN in column 0.

    Args:
        depth: the recorded depth (the policies' ``max``).
        index: [N rows] ``question_id``, ``turn``, ``position``, ``n_tokens`` (of the turn), ``token`` (the
            full-depth token), ``cut_by_budget`` (the turn stopped at its token budget).
        values: rule -> [N, I] float64, the number the live rule thresholds (NaN where not recorded: ``state``
            beyond the full-state window).
        argmax: [N, I] int64, the token each iteration would emit (-1 where not recorded).
        l2: [N, I] float64, ``||h_i - h_{i-1}||`` of the last layer's output (NaN in column 0 and beyond the
            full-state window).
        layer: the layer of ``l2`` and of ``state``.
    """

    depth: int
    index: pd.DataFrame
    values: dict[str, np.ndarray]
    argmax: np.ndarray
    l2: np.ndarray
    layer: int


def collect_trajectories(run: Any, rules: Sequence[str] | None = None, depth: int | None = None) -> Trajectories:
    """Read every position's per-iteration rule values, argmax and L2 change from a fixed-depth run.

    Args:
        run: a :class:`~sst_interp.store.Run` recorded at fixed depths with per-iteration logits.
        rules: rules to read (default: every rule the run can replay, :func:`sweepable_rules`).
        depth: the depth to read (default: the deepest).
    """
    import torch

    from sst_interp.model.halting import kl_from_logprobs, margin_from_top2, relative_change

    reason = fixed_run_reason(run.manifest)
    if reason is not None:
        raise UsageError(reason)
    can = sweepable_rules(run.manifest)
    rules = [r for r in SWEEPABLE if can[r] is None] if rules is None else list(rules)
    for rule in rules:
        if rule not in can:
            raise UsageError(f"unknown rule {rule!r}; the sweep replays {', '.join(SWEEPABLE)}")
        if can[rule] is not None:
            raise UsageError(f"cannot replay {rule} on {run.path}: {can[rule]}")
    depth = max(run.depths) if depth is None else int(depth)
    layer = state_layer(run.manifest, run.num_layers)
    gens = run.generations()
    gens = gens[gens["depth"] == depth].sort_values(["question_id", "turn"])
    index_rows: list[dict[str, Any]] = []
    values: dict[str, list[np.ndarray]] = {r: [] for r in rules}
    argmax: list[np.ndarray] = []
    l2: list[np.ndarray] = []
    hidden_window = int(run.manifest.get("full_positions") or 0) > 0
    for qid, rows in gens.groupby("question_id", sort=False):
        logit_blocks = {b.turn: b for b in run.logits(depth, [qid])}
        hidden_blocks = {b.turn: b for b in run.hidden(depth, [qid], layers=[layer])} if hidden_window else {}
        for row in rows.itertuples():
            n = len(row.token_ids)
            turn = int(row.turn)
            block, hidden = logit_blocks.get(turn), hidden_blocks.get(turn)
            for position in range(n):
                index_rows.append({"question_id": str(qid), "turn": turn, "position": position, "n_tokens": n,
                                   "token": int(row.token_ids[position]),
                                   "cut_by_budget": row.stop_reason == "max_new_tokens"})
                p = _where(block, position)
                h = _where(hidden, position)
                states = hidden.values[h, :, 0].astype(np.float32) if h is not None else None
                if states is not None and (np.isnan(states).any() or states.shape[0] != depth):
                    states = None  # a layer the loop does not visit at every iteration carries no trajectory
                am = np.full(depth, -1, dtype=np.int64)
                if p is not None:
                    am[:] = block.argmax[p, :depth]
                argmax.append(am)
                delta = np.full(depth, np.nan)
                if states is not None:
                    diff = np.diff(states.astype(np.float64), axis=0)
                    delta[1:] = np.sqrt(np.einsum("id,id->i", diff, diff))
                l2.append(delta)
                for rule in rules:
                    v = np.full(depth, np.nan)
                    if rule == "state":
                        if states is not None:
                            s = torch.from_numpy(states)
                            v[1:] = relative_change(s[1:], s[:-1]).numpy()
                    elif p is not None and not np.isnan(block.entropy[p, :depth]).any():
                        if rule == "entropy":
                            v[:] = block.entropy[p, :depth].astype(np.float64)
                        elif rule == "margin":
                            top2 = torch.from_numpy(block.top_logprobs[p, :depth, :2].copy())
                            v[:] = margin_from_top2(top2).double().numpy()
                        elif rule == "kl":
                            order = np.argsort(block.top_ids[p, :depth], axis=-1)
                            lp = torch.from_numpy(np.take_along_axis(block.top_logprobs[p, :depth], order, axis=-1)
                                                  .astype(np.float32))
                            for i in range(1, depth):
                                v[i] = float(kl_from_logprobs(lp[i:i + 1], lp[i - 1:i])[0])
                    values[rule].append(v)
    index = pd.DataFrame(index_rows, columns=["question_id", "turn", "position", "n_tokens", "token",
                                              "cut_by_budget"])

    def stack(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
        return np.stack(parts).astype(dtype) if parts else np.zeros((0, depth), dtype=dtype)

    return Trajectories(depth, index, {r: stack(v, np.float64) for r, v in values.items()}, stack(argmax, np.int64),
                        stack(l2, np.float64), layer)


def _where(block: Any, position: int) -> int | None:
    if block is None:
        return None
    hits = np.nonzero(block.positions == position)[0]
    return int(hits[0]) if len(hits) else None
