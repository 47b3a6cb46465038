"""Offline simulation of a per-position depth policy on a run recorded at fixed depth ``max``.

At every generated position the simulation exits at the first iteration whose recorded values satisfy the policy
(:meth:`~sst_interp.model.halting.PositionPolicy.halt`), reading the same numbers the live policy reads:

- ``entropy``: the logits shard's ``entropy`` column is the live value (same float32 formula);
- ``margin``: the first two ``top_logprobs`` (needs ``top_k >= 2``);
- ``kl``: needs the full distribution: exact only when ``top_k`` covers the vocabulary (``vocab_size`` in the
  manifest); top-K alone would only approximate it, so a run with a smaller K is refused;
- ``state``: the relative change of the last stateful layer's state, which under ``update = direct`` is that
  layer's recorded output; only the first ``full_positions`` positions of a turn hold hidden states;
- ``probe-pos``: the probe on the recorded output of its layer (float32, as live), first ``full_positions`` only.

What is exact, and where it stops. The recorded run ran every position to ``max``. A position's decision is
exact as long as every earlier position also ran to ``max`` under the policy, because then the policy's
iterations 1..i at this position are the recorded ones. At the first position where the policy exits early
(iteration h < max) the simulation is still exact for that position (its iteration count, and its token: the
argmax recorded at iteration h), but from the next position on the live run continues from iteration h's state
and KV entry, which the recording does not hold. The question is reported ``diverged`` from there, never guessed.
(So the simulation is exact until the first early exit, not until the first changed token: an early exit that
emits the full-depth token still changes the state every later position reads.) Positions beyond the recorded
window (or, for ``state``, beyond ``full_positions``) end the exact part too (``stop = "window"``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from sst_interp.analyses.loop_manifest import lens_reason, state_layer
from sst_interp.kernels.errors import UsageError
from sst_interp.model.halting import (
    PositionPolicy,
    kl_from_logprobs,
    margin_from_top2,
    parse_position_policy,
    relative_change,
    rule_fires,
)
from sst_interp.probe.policy import ProbeDepth
from sst_interp.probe.simulation_config import PositionSimConfig
from sst_interp.store import Run


@dataclass
class SimulatedTurn:
    """The simulated policy on one (question, turn).

    Args:
        question_id, turn: where.
        iterations: [E] iterations of each exactly simulated position (E = ``len(iterations)``).
        tokens: [E] the token each of those positions emits under the policy.
        full_tokens: [E] the full-depth (recorded) tokens at those positions.
        stop: why the exact part ends: ``end`` (the turn's last token: the whole turn is exact), ``early_exit``
            (the position after an early exit), ``window`` (no recorded values beyond), or ``upstream`` (an
            earlier turn already diverged: nothing of this turn is exact).
        n_tokens: tokens the full-depth run generated in this turn.
    """

    question_id: str
    turn: int
    iterations: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    full_tokens: list[int] = field(default_factory=list)
    stop: str = "end"
    n_tokens: int = 0

    @property
    def diverged(self) -> bool:
        """Whether the policy's run leaves what the recording can say (anything but ``end``)."""
        return self.stop != "end"


def check_simulable(manifest: dict[str, Any], policy: PositionPolicy) -> None:
    """Refuse (UsageError) a run or a rule the simulation cannot reproduce exactly (see the module docstring), and
    a family run whose per-iteration logits are not the emitted distribution (:func:`lens_reason`)."""

    lens = lens_reason(manifest)
    if lens is not None:
        raise UsageError(f"cannot simulate a per-position depth policy on this run: {lens}")
    if manifest.get("depth_policy", "fixed") != "fixed":
        raise UsageError(f"simulate from a fixed-depth run; this run used --depth-policy {manifest['depth_policy']}")
    if policy.max_depth not in manifest["depths"]:
        raise UsageError(f"the run has depths {manifest['depths']}; simulating max={policy.max_depth} needs a run "
                         f"recorded at depth {policy.max_depth}")
    if not manifest.get("logits_every_iteration", False):
        raise UsageError("the run has no per-iteration logits; record it with python -m sst_interp.record")
    names = {name for name, _ in policy.rules}
    if "kl" in names:
        vocab = manifest.get("vocab_size")
        if vocab is None or manifest["top_k"] < vocab:
            raise UsageError(f"kl needs the full next-token distribution, but the run kept the top {manifest['top_k']} "
                             f"of {vocab or 'an unrecorded number of'} log-probs (top-K only approximates KL); "
                             f"record with --top-k {vocab or 'VOCAB_SIZE'}")
    if "margin" in names and manifest["top_k"] < 2:
        raise UsageError("margin needs the top two log-probs; record with --top-k 2 or more")
    if "state" in names and manifest.get("sst", {}).get("update", "direct") != "direct":
        raise UsageError("state reads the carried state, which equals the recorded layer output only under "
                         "update=direct")


def _full_logprobs(top_ids: np.ndarray, top_logprobs: np.ndarray) -> torch.Tensor:
    """[I, K] recorded ids and log-probs covering the vocabulary -> [I, V] log-probs in vocabulary order."""
    order = np.argsort(top_ids, axis=-1)
    return torch.from_numpy(np.take_along_axis(top_logprobs, order, axis=-1).astype(np.float32))


def _kl_rows(logprobs: torch.Tensor) -> torch.Tensor:
    """[I] KL(p_i || p_{i-1}) for i >= 2 (index 0 unused), from [I, V] float32 log-probs, as the live rule."""
    out = torch.full((logprobs.shape[0],), float("nan"), dtype=torch.float64)
    for i in range(1, logprobs.shape[0]):
        out[i] = kl_from_logprobs(logprobs[i:i + 1], logprobs[i - 1:i])[0]
    return out


def halting_iteration(policy: PositionPolicy, values: dict[str, np.ndarray], probe_threshold: float = 0.0) -> int:
    """The first iteration (1-based) at which ``policy`` halts, given each rule's values per iteration ``[I]``
    (index i = iteration i + 1; NaN where undefined, e.g. iteration 1 of a pairwise rule)."""
    for iteration in range(1, policy.max_depth + 1):
        if iteration >= policy.max_depth:
            return iteration
        if iteration < policy.min_depth:
            continue
        for name, tau in policy.rules:
            value = values[name][iteration - 1]
            if not np.isnan(value) and bool(rule_fires(name, tau, torch.tensor([value]))[0]):
                return iteration
        if "probe-pos" in values and values["probe-pos"][iteration - 1] > probe_threshold:
            return iteration
    return policy.max_depth


def _rule_values(policy: PositionPolicy, logits: Any, p: int, states: np.ndarray | None) -> dict[str, np.ndarray]:
    """Each rule's values at position row ``p`` of a logits block over iterations 1..max: name -> [I]."""
    out: dict[str, np.ndarray] = {}
    for name, _ in policy.rules:
        if name == "entropy":
            out[name] = logits.entropy[p].astype(np.float64)
        elif name == "margin":
            out[name] = margin_from_top2(torch.from_numpy(logits.top_logprobs[p, :, :2].copy())).double().numpy()
        elif name == "kl":
            out[name] = _kl_rows(_full_logprobs(logits.top_ids[p], logits.top_logprobs[p])).numpy()
        elif name == "state":
            assert states is not None
            now = torch.from_numpy(states[1:])
            prev = torch.from_numpy(states[:-1])
            out[name] = np.concatenate([[np.nan], relative_change(now, prev).numpy()])
    return out


def simulate_policy(run: Any, policy: PositionPolicy) -> list[SimulatedTurn]:
    """Simulate ``policy`` on every (question, turn) of ``run`` (a :class:`~sst_interp.store.Run` recorded at
    fixed depth ``policy.max_depth``); turns of a question in order (a diverged turn makes the later ones
    ``upstream``)."""
    check_simulable(run.manifest, policy)
    depth = policy.max_depth
    gens = run.generations()
    gens = gens[gens["depth"] == depth].sort_values(["question_id", "turn"])
    needs_state = policy.needs_state
    probe = None
    if policy.probe_path is not None:
        probe = ProbeDepth.from_path(policy.probe_path)
    last_layer = None
    if needs_state:
        last_layer = state_layer(run.manifest, run.num_layers)
    out: list[SimulatedTurn] = []
    for qid, rows in gens.groupby("question_id", sort=False):
        logit_blocks = {b.turn: b for b in run.logits(depth, [qid])}
        state_blocks = ({b.turn: b for b in run.hidden(depth, [qid], layers=[last_layer])} if needs_state else {})
        probe_blocks = ({b.turn: b for b in run.hidden(depth, [qid], layers=[probe.probe_layer])}
                        if probe is not None else {})
        upstream = False
        for row in rows.itertuples():
            full = [int(t) for t in row.token_ids]
            turn = SimulatedTurn(str(qid), int(row.turn), n_tokens=len(full))
            out.append(turn)
            if upstream:
                turn.stop = "upstream"
                continue
            block = logit_blocks.get(int(row.turn))
            hidden = state_blocks.get(int(row.turn))
            probed = probe_blocks.get(int(row.turn))
            for position in range(len(full)):
                p = _index(block, position)
                s = _index(hidden, position) if needs_state else 0
                h = _index(probed, position) if probe is not None else 0
                if p is None or s is None or h is None:
                    turn.stop = "window"
                    break
                states = hidden.values[s, :, 0].astype(np.float32) if needs_state else None
                if np.isnan(block.entropy[p]).any() or (states is not None and np.isnan(states).any()):
                    turn.stop = "window"
                    break
                values = _rule_values(policy, block, p, states)
                if probe is not None:
                    probe_in = torch.from_numpy(probed.values[h, :, 0].astype(np.float32))
                    if torch.isnan(probe_in).any():
                        turn.stop = "window"
                        break
                    # The live comparison itself (float32 logits against the threshold), as 1.0 / 0.0.
                    values["probe-pos"] = (probe.logits(probe_in) > probe.threshold).double().numpy()
                halt = halting_iteration(policy, values, 0.5)
                turn.iterations.append(halt)
                turn.tokens.append(int(block.argmax[p, halt - 1]))
                turn.full_tokens.append(full[position])
                if halt < depth:
                    # The last position's early exit changes nothing later in the turn, unless its token differs
                    # (then the live turn may go on where the recorded one ended, except at the token budget).
                    last = position == len(full) - 1
                    same_end = turn.tokens[-1] == full[position] or row.stop_reason == "max_new_tokens"
                    if not (last and same_end):
                        turn.stop = "early_exit"
                        break
            # Any early exit leaves a KV entry (and, carried across turns, a state) the recording lacks: the next
            # turn's prefill reads it, so nothing after it is exact.
            upstream = turn.diverged or any(i < depth for i in turn.iterations)
    return out


def _index(block: Any, position: int) -> int | None:
    if block is None:
        return None
    hits = np.nonzero(block.positions == position)[0]
    return int(hits[0]) if len(hits) else None


def simulation_table(turns: list[SimulatedTurn], policy: PositionPolicy) -> pd.DataFrame:
    """One row per (question, turn): ``policy``, ``exact_positions``, ``n_tokens``, ``stop``, ``diverged``,
    ``mean_iterations`` (over the exact positions), ``token_changed`` (an exact position emits a token other than
    the full-depth one)."""
    return pd.DataFrame([{
        "question_id": t.question_id, "turn": t.turn, "policy": policy.describe(),
        "exact_positions": len(t.iterations), "n_tokens": t.n_tokens, "stop": t.stop, "diverged": t.diverged,
        "mean_iterations": float(np.mean(t.iterations)) if t.iterations else float("nan"),
        "token_changed": t.tokens != t.full_tokens,
    } for t in turns])


def summarize(table: pd.DataFrame, max_depth: int) -> pd.DataFrame:
    """Per policy: turns, the fraction whose whole answer the simulation reproduces (``exact_turns``), exact
    positions, and mean iterations over those positions (and its ratio to ``max_depth``)."""
    grouped = table.groupby("policy", sort=False)
    out = pd.DataFrame({
        "turns": grouped.size(),
        "exact_turns": grouped["diverged"].apply(lambda d: float((~d).mean())),
        "exact_positions": grouped["exact_positions"].sum(),
        "mean_iterations": grouped.apply(lambda g: float(np.average(g["mean_iterations"].fillna(0),
                                                                    weights=g["exact_positions"]))
                                         if g["exact_positions"].sum() else float("nan")),
    })
    out["compute_fraction"] = out["mean_iterations"] / max_depth
    return out.reset_index()


def simulate_policies(config: PositionSimConfig) -> tuple[pd.DataFrame, list[PositionPolicy]]:
    """Simulate every policy of ``config`` on its run: (the per-(question, turn) table of them all, written to
    ``config.out`` when given; the parsed policies, ``max`` defaulting to the run's deepest depth)."""

    recorded = Run.open(config.run)
    default_max = max(recorded.depths) if recorded.depths else 1
    policies = [parse_position_policy(text, default_max) for text in config.policy]
    table = pd.concat([simulation_table(simulate_policy(recorded, p), p) for p in policies], ignore_index=True)
    if config.out is not None:
        table.to_csv(config.out, index=False)
    return table, policies
