"""Per-position depth policies measured as accuracy against compute (issue 23, item 4).

Three measurements, all from recorded runs:

- **Pareto rows** (:func:`pareto_rows`): one row per condition: accuracy, mean iterations per generated token and,
  where known, wall time. A fixed-depth run gives its flat depths (``live``), staged capacity (``oracle``: the
  first correct depth is known only in hindsight) and a threshold sweep of every rule it can replay
  (``simulated``). A run recorded under a per-position or per-turn policy gives its own ``live`` row from the
  ``iterations`` column of ``generations``.
- **Iterations per position by regime** (:func:`iteration_histogram`): where each rule would stop on the recorded
  full-depth trajectory, split into low-overlap positions (a basin shift between iteration 1 and ``max``, the
  paper's regime labels at the run's GMM crossover) and the rest.
- **Agreement with convergence monitoring** (:func:`convergence_agreement`): the iteration each rule stops at
  against the iteration at which the L2 change of the last layer's state falls below the run's median change
  (the quantity of ``fig:convergence_monitoring``).

**What a simulated row can say.** On a run recorded at fixed depth ``max`` a rule's decision at a position is read
from the recorded iterations of that position (the same numbers the live rule reads:
:mod:`sst_interp.model.halting`). That decision is the live one only until the first early exit: afterwards the
live run continues from a state and KV entry the recording lacks (see
:mod:`sst_interp.probe.policy_simulation`, whose exactness rule :func:`exact_questions` reproduces). So a simulated
row gives

- ``exact_questions``: questions the simulation reproduces whole (no early exit, or only at the last token with the
  full-depth token); their outcome is the full-depth outcome;
- ``accuracy_low_pct`` / ``accuracy_high_pct``: the accuracy bounds that follow (the diverged questions all wrong /
  all right); never a point estimate;
- ``mean_iterations``: the mean stopping iteration over every recorded position *on the full-depth trajectory*
  (``basis = full-depth trajectory``), an estimate of the policy's compute, not a measurement of it.

Simulated rows carry no wall time. Live rows carry one when the caller knows it (runs do not record wall time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.analyses import sections, tidy
from sst_interp.analyses.figure_data import FigureData
from sst_interp.analyses.measurement import Measurement, figure_main
from sst_interp.kernels.results import AnalysisResult, NotApplicable
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.outcomes import correctness_matrix, outcome_rows

#: Rules a recorded fixed-depth run can replay (``probe-pos`` needs a probe: use position_sim for it).
SWEEPABLE: tuple[str, ...] = ("kl", "entropy", "margin", "state")
#: Default quantiles of each rule's recorded values at which the sweep puts its thresholds.
QUANTILES: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75, 0.9)
PARETO_COLUMNS: tuple[str, ...] = (
    "run", "condition", "policy", "source", "n_questions", "accuracy_pct", "accuracy_low_pct", "accuracy_high_pct",
    "exact_questions", "mean_iterations", "basis", "wall_s", "pareto")


# ------------------------------------------------------------------------------------------------ trajectories
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


def sweepable_rules(manifest: Mapping[str, Any]) -> dict[str, str | None]:
    """rule -> None when a fixed-depth run with this manifest can replay it, else the reason it cannot."""
    out: dict[str, str | None] = {name: None for name in SWEEPABLE}
    vocab, top_k = manifest.get("vocab_size"), int(manifest.get("top_k") or 0)
    if vocab is None or top_k < int(vocab):
        out["kl"] = (f"kl needs the full next-token distribution; the run kept the top {top_k} of "
                     f"{vocab or 'an unrecorded number of'} log-probs")
    if top_k < 2:
        out["margin"] = "margin needs the top two log-probs (top_k >= 2)"
    if manifest.get("sst", {}).get("update", "direct") != "direct":
        out["state"] = "state reads the carried state, which equals the recorded layer output only under update=direct"
    if int(manifest.get("full_positions") or 0) < 1:
        out["state"] = "state needs recorded hidden states (full_positions >= 1)"
    return out


def declared_state_layer(manifest: Mapping[str, Any]) -> int | None:
    """A latent-iteration family's ``loop.state_layer`` (docs/families.md): the recorded layer whose output is the
    carried loop state; None for SST runs (and runs written without it)."""
    declared = (manifest.get("loop") or {}).get("state_layer")
    return None if declared is None else int(declared)


def layers_at_every_iteration(manifest: Mapping[str, Any]) -> list[int] | None:
    """The recorded layers a latent-iteration family visits at every iteration of its deepest recorded depth
    (``loop.iterations_per_layer``); None for SST runs, whose every layer runs at every iteration. A measurement
    that needs a layer's state at each iteration (the halting probe's layer sweep) chooses among these."""
    loop = manifest.get("loop") or {}
    counts = loop.get("iterations_per_layer") or {}
    if not counts:
        return None
    deepest = max(counts, key=int)
    return [layer for layer, count in enumerate(counts[deepest]) if int(count) == int(deepest)]


def state_layer(manifest: Mapping[str, Any], num_layers: int) -> int:
    """The recorded layer whose output is the carried loop state: a family's declared one
    (:func:`declared_state_layer`), else the SST's last stateful layer, else the last layer."""
    declared = declared_state_layer(manifest)
    if declared is not None:
        return declared
    layers = manifest.get("sst", {}).get("layers")
    return int(max(layers)) if layers else num_layers - 1


def lens_reason(manifest: Mapping[str, Any]) -> str | None:
    """Why a run's per-iteration logits are not the distribution its tokens are chosen from (None when they are):
    a latent-iteration family whose lens is a logit lens of its looped block (``loop.lens_is_output`` false:
    Inkling-2 Loop, Dory, a bring-your-own block with layers after it). Replaying a per-position exit reads the
    lens at an earlier iteration as the token the model would emit there, which for such a family it is not: the
    layers after the block never ran on that iteration's state, and the model records no logits it emits
    mid-loop to simulate from. A family run written before the field existed is judged by its family name."""
    loop = manifest.get("loop") or {}
    if not loop:
        return None  # an SST run: each iteration's logits are the emitting pass's own
    is_output = loop.get("lens_is_output")
    if is_output is None:
        is_output = loop.get("family") in ("sst", "hrm_text")  # the families whose last-iteration lens is the head's
    if is_output:
        return None
    return (f"the {loop.get('family') or 'family'} lens is not the emitted distribution (its per-iteration logits "
            f"are a logit lens of the looped block, which later layers follow), so a per-position exit cannot be "
            f"simulated from it, and the model emits no logits mid-loop to simulate from")


def fixed_run_reason(manifest: Mapping[str, Any]) -> str | None:
    """Why a run cannot be replayed (None when it can): it must be fixed-depth, depth >= 2, logits every
    iteration, and those logits must be the distribution the tokens are chosen from (:func:`lens_reason`)."""
    lens = lens_reason(manifest)
    if lens is not None:
        return lens
    policy = str(manifest.get("depth_policy", "fixed"))
    if policy != "fixed":
        return f"the run used --depth-policy {policy}; replaying rules needs a fixed-depth run"
    if max(manifest.get("depths") or [0]) < 2:
        return f"the run has depths {manifest.get('depths')}; replaying rules needs a depth >= 2"
    if not manifest.get("logits_every_iteration", False):
        return "the run has no per-iteration logits"
    return None


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


# ------------------------------------------------------------------------------------------------ decisions
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


# ------------------------------------------------------------------------------------------------ Pareto
@dataclass(frozen=True)
class ParetoResult(AnalysisResult):
    """Accuracy against compute of one or more runs: rows with :data:`PARETO_COLUMNS`."""

    rows: pd.DataFrame
    notes: tuple[str, ...] = ()

    def table(self) -> pd.DataFrame:
        return self.rows


def mark_pareto(frame: pd.DataFrame) -> pd.DataFrame:
    """``pareto`` = True for measured rows (``live``, a ``replayed`` per-turn probe) that no other measured row
    beats on both accuracy (higher) and mean iterations (lower). The staged oracle is a hindsight bound (it knows
    each question's first correct depth), not a policy anyone can run: it is never on the front and is not a row the
    others are measured against. Simulated rows have no point accuracy and are never on the front."""
    out = frame.copy()
    measured = out["source"].isin(["live", "replayed"]) & out["accuracy_pct"].notna()
    front = np.zeros(len(out), dtype=bool)
    acc, it = out["accuracy_pct"].to_numpy(float), out["mean_iterations"].to_numpy(float)
    idx = np.flatnonzero(measured.to_numpy())
    for i in idx:
        dominated = any((acc[j] >= acc[i] and it[j] <= it[i]) and (acc[j] > acc[i] or it[j] < it[i]) for j in idx)
        front[i] = not dominated
    out["pareto"] = front
    return out


def row_of(**values: Any) -> dict[str, Any]:
    """One Pareto row: ``values`` over NaN in every other column of :data:`PARETO_COLUMNS`."""
    row = {c: np.nan for c in PARETO_COLUMNS}
    row.update(values)
    return row


def live_rows(run: Any, name: str, wall_s: float | None = None) -> list[dict[str, Any]]:
    """Measured rows of one run: each flat depth (a fixed run) or the run's policy (per-position / per-turn), and
    the staged oracle of a run with several flat depths. Mean iterations are token-weighted over every turn."""
    gens = run.generations()
    policy = str(run.manifest.get("depth_policy", "fixed"))
    wall = np.nan if wall_s is None else float(wall_s)
    if policy != "fixed":
        # One condition, whatever depth each question is filed under (a per-turn probe files it under its choice).
        verdicts = outcome_rows(run).sort_values("turn", kind="stable").groupby("question_id").tail(1)
        n = len(verdicts)
        acc = 100.0 * float(verdicts["correct"].astype(bool).sum()) / n if n else np.nan
        counts = np.concatenate([_token_iterations(gens[gens["depth"] == d], d) for d in sorted(run.depths)])
        return [row_of(run=name, condition=_policy_label(policy), policy=policy, source="live", n_questions=n,
                     accuracy_pct=acc, accuracy_low_pct=acc, accuracy_high_pct=acc, exact_questions=n,
                     mean_iterations=float(np.mean(counts)) if len(counts) else np.nan, basis="recorded",
                     wall_s=wall)]
    correct = correctness_matrix(run)
    gens = gens[gens["question_id"].isin(correct.index)]  # the questions recorded at every depth
    rows: list[dict[str, Any]] = []
    for depth in sorted(run.depths):
        part = gens[gens["depth"] == depth]
        if part.empty or depth not in correct.columns:
            continue
        counts = _token_iterations(part, depth)
        n = int(correct[depth].notna().sum())
        acc = 100.0 * float(correct[depth].sum()) / n if n else np.nan
        rows.append(row_of(run=name, condition=f"fixed {depth}", policy=f"fixed:{depth}",
                         source="live", n_questions=n, accuracy_pct=acc, accuracy_low_pct=acc,
                         accuracy_high_pct=acc, exact_questions=n,
                         mean_iterations=float(np.mean(counts)) if len(counts) else np.nan, basis="recorded",
                         wall_s=wall if len(run.depths) == 1 else np.nan))
    if len(run.depths) >= 2 and not correct.empty:
        depths = sorted(int(d) for d in correct.columns)
        tokens = gens.assign(n=gens["token_ids"].map(len)).groupby(["question_id", "depth"])["n"].sum()
        spent, total, solved = 0.0, 0, 0
        for qid, flags in correct.iterrows():
            hit = [d for d in depths if bool(flags[d])]
            d = hit[0] if hit else depths[-1]
            solved += bool(hit)
            n_tok = int(tokens.get((qid, d), 0))
            spent += d * n_tok
            total += n_tok
        n = len(correct)
        acc = 100.0 * solved / n
        rows.append(row_of(run=name, condition="staged (oracle)", policy="staged:" + ",".join(map(str, depths)),
                         source="oracle", n_questions=n, accuracy_pct=acc, accuracy_low_pct=acc, accuracy_high_pct=acc,
                         exact_questions=n, mean_iterations=spent / total if total else np.nan,
                         basis="first correct depth, known in hindsight"))
    return rows


def _policy_label(text: str) -> str:
    """A recorded policy string as a short label: per-position rules via :func:`short_name`, a per-turn probe as
    ``probe (per turn)``."""
    if text.startswith("probe:"):
        return "probe (per turn)"
    from sst_interp.model.halting import parse_position_policy

    try:
        return short_name(parse_position_policy(text, 1)) + " (live)"
    except UsageError:  # a probe-pos file that is not here any more: the string as recorded
        return text


def _token_iterations(gens: pd.DataFrame, depth: int) -> np.ndarray:
    """[tokens] the iterations every generated token ran: the ``iterations`` column, or (a run without it, which
    the format allows) the row's ``chosen_depth``, else ``depth``, for each of its tokens."""
    parts = []
    has_counts = "iterations" in gens.columns
    for row in gens.itertuples():
        counts = getattr(row, "iterations") if has_counts else None
        if counts is not None and len(counts) == len(row.token_ids):
            parts.append(np.asarray(counts, dtype=np.int64))
        else:
            chosen = getattr(row, "chosen_depth", None)
            fill = depth if chosen is None or pd.isna(chosen) else int(chosen)
            parts.append(np.full(len(row.token_ids), fill, dtype=np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def short_name(policy: Any) -> str:
    """A policy's rules with 6-digit thresholds and its bounds when they are not the defaults (figure labels)."""
    parts = [f"{name}:{tau:.6g}" for name, tau in policy.rules]  # 6 digits: margins crowd just below 1
    if policy.probe_path is not None:
        parts.append("probe-pos")
    if policy.min_iterations != 1:
        parts.append(f"min={policy.min_iterations}")
    return ",".join(parts)


def simulated_rows(run: Any, name: str, traj: Trajectories, policies: Sequence[Any]) -> list[dict[str, Any]]:
    """One simulated row per policy (PositionPolicy) on a fixed-depth run's trajectories (module docstring)."""
    correct = correctness_matrix(run)
    depth = traj.depth
    if depth not in correct.columns:
        return []
    right = correct[depth]
    rows = []
    for policy in policies:
        halt = halting_iterations(traj, policy)
        exact = exact_questions(traj, halt).reindex(right.index, fill_value=False)
        n = len(right)
        known = halt[halt > 0]
        low = 100.0 * float((right & exact).sum()) / n
        high = 100.0 * float((right & exact).sum() + (~exact).sum()) / n
        rows.append(row_of(run=name, condition=short_name(policy), policy=policy.describe(), source="simulated",
                         n_questions=n, accuracy_low_pct=low, accuracy_high_pct=high,
                         exact_questions=int(exact.sum()),
                         mean_iterations=float(known.mean()) if known.size else np.nan,
                         basis="full-depth trajectory (estimate)"))
    return rows


def default_policies(traj: Trajectories, rules: Sequence[str] | None = None,
                     quantiles: Sequence[float] = QUANTILES) -> list[Any]:
    """``rule:tau,max=depth`` for every read rule (or ``rules``) at :func:`sweep_thresholds`."""
    from sst_interp.model.halting import parse_position_policy

    out = []
    for rule in (rules if rules is not None else list(traj.values)):
        for tau in sweep_thresholds(traj, rule, quantiles):
            out.append(parse_position_policy(f"{rule}:{tau!r},max={traj.depth}", traj.depth))
    return out


def pareto(run: Any, name: str | None = None, quantiles: Sequence[float] = QUANTILES,
           wall_s: float | None = None, traj: Trajectories | None = None) -> ParetoResult:
    """The Pareto rows of one run (module docstring): its measured rows, and for a replayable fixed-depth run the
    simulated sweep of every rule it can replay (``traj``: its trajectories, when already read)."""
    name = name or run.path.name
    rows = live_rows(run, name, wall_s)
    notes = ["runs record no wall time; live rows show it only where the caller measured it"
             if wall_s is None else f"wall time of {name}: {wall_s:.0f} s, measured around record"]
    lens = lens_reason(run.manifest)
    if lens is not None:
        # the measured rows stand (the model's own tokens); only the simulated sweep would read the lens
        notes.append(f"no simulated rows: {lens}")
    elif fixed_run_reason(run.manifest) is None:
        cannot = {r: why for r, why in sweepable_rules(run.manifest).items() if why is not None}
        traj = collect_trajectories(run) if traj is None else traj
        rows += simulated_rows(run, name, traj, default_policies(traj, quantiles=quantiles))
        notes += [f"not simulated: {why}" for why in cannot.values()]
        notes.append("simulated rows: accuracy bounds from the questions the simulation reproduces exactly; mean "
                     "iterations on the full-depth trajectory (an estimate)")
    frame = mark_pareto(pd.DataFrame(rows, columns=list(PARETO_COLUMNS)))
    return ParetoResult(frame, tuple(notes))


def combine(results: Sequence[ParetoResult]) -> ParetoResult:
    """Several runs' Pareto rows in one table, the front recomputed over all of them. A condition label that
    several runs share is qualified with its run (``run: condition``), and a note warns when the measured rows come
    from different numbers of questions (then they are not measured on one question set)."""
    frames = [r.rows for r in results if not r.rows.empty]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(PARETO_COLUMNS))
    notes = tuple(dict.fromkeys(n for r in results for n in r.notes))
    if not frame.empty:
        shared = frame["condition"].duplicated(keep=False) & frame["run"].notna()
        frame.loc[shared, "condition"] = frame.loc[shared, "run"].astype(str) + ": " + frame.loc[shared, "condition"]
        warning = question_set_warning(frame)
        if warning:
            notes = (*notes, warning)
    return ParetoResult(mark_pareto(frame), notes)


def question_set_warning(frame: pd.DataFrame) -> str | None:
    """A warning line when the measured rows of ``frame`` count different numbers of questions, else None."""
    measured = frame[frame["source"] != "simulated"].dropna(subset=["n_questions"])
    sizes = measured.groupby("run", dropna=False)["n_questions"].agg(lambda n: sorted({int(v) for v in n}))
    if len({n for values in sizes for n in values}) < 2:
        return None
    listed = "; ".join(f"{run}: n = {', '.join(map(str, n))}" for run, n in sizes.items())
    return (f"warning: these rows are measured on different question sets ({listed}); accuracies and the front "
            f"compare different questions")


# ------------------------------------------------------------------------------------------------ regimes, agreement
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


def median_policies(traj: Trajectories) -> list[Any]:
    """Each read rule at the median of its recorded values (the sweep's middle threshold), max = the run's depth."""
    return default_policies(traj, quantiles=(0.5,))


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


def convergence_agreement(pp: PolicyPositions) -> pd.DataFrame:
    """Per policy, over positions with both decisions: ``positions``, ``agree`` (same iteration), ``earlier`` /
    ``later`` (the rule stops before / after convergence), ``mean_difference`` (rule minus convergence, iterations),
    Cohen's kappa and Spearman's rho with its p (NaN where either side is constant)."""
    from scipy import stats
    from sklearn.metrics import cohen_kappa_score

    rows = []
    for (rule, policy), part in pp.positions.groupby(["rule", "policy"], sort=False):
        both = part[(part["iterations"] > 0) & (part["converged"] > 0)]
        a, b = both["iterations"].to_numpy(), both["converged"].to_numpy()
        row = {"rule": rule, "policy": policy, "positions": int(len(both))}
        if len(both):
            constant = np.unique(a).size < 2 or np.unique(b).size < 2
            rho = stats.spearmanr(a, b) if not constant else None
            row.update(agree=float((a == b).mean()), earlier=float((a < b).mean()), later=float((a > b).mean()),
                       mean_difference=float((a - b).mean()),
                       cohen_kappa=float(cohen_kappa_score(a, b)) if not (np.unique(np.r_[a, b]).size < 2) else np.nan,
                       spearman_rho=float(rho.statistic) if rho is not None else np.nan,
                       spearman_p=float(rho.pvalue) if rho is not None else np.nan)
        rows.append(row)
    columns = ["rule", "policy", "positions", "agree", "earlier", "later", "mean_difference", "cohen_kappa",
               "spearman_rho", "spearman_p"]
    return pd.DataFrame(rows).reindex(columns=columns)


@dataclass(frozen=True)
class AgreementResult(AnalysisResult):
    """:func:`convergence_agreement` of the median-threshold policies, with the convergence threshold."""

    frame: pd.DataFrame
    l2_threshold: float
    layer: int
    depth: int
    meta: dict[str, Any] = field(default_factory=dict)

    def table(self) -> pd.DataFrame:
        return self.frame


def replay_reason(run: Any) -> str | None:
    """Why the regime and agreement measurements cannot use this run (None when they can)."""
    reason = fixed_run_reason(run.manifest)
    if reason is not None:
        return reason
    if not any(why is None for why in sweepable_rules(run.manifest).values()):
        return "the run supports no replayable rule"
    return None


def trajectories_of(analysis: Any) -> Trajectories:
    """:func:`collect_trajectories` of a RunAnalysis' run, read once per analysis (the Pareto rows, the histogram
    and the agreement share it)."""
    return analysis._once("depth_trajectories", lambda: collect_trajectories(analysis.run))


def pareto_of(analysis: Any) -> ParetoResult:
    """:func:`pareto` of a RunAnalysis' run, named after its folder."""
    run = analysis.run
    traj = trajectories_of(analysis) if replay_reason(run) is None else None
    return pareto(run, run.path.name, traj=traj)


def positions_of(analysis: Any) -> PolicyPositions | NotApplicable:
    """The median-threshold policies' positions of a RunAnalysis' run (regimes at its GMM crossover)."""
    reason = replay_reason(analysis.run)
    if reason is not None:
        return NotApplicable(reason, "depth_policy_positions")
    traj = trajectories_of(analysis)
    try:
        labels = analysis.regime_labels()
    except UsageError:
        labels = None  # no hidden-state overlaps to label: every position is "unlabelled"
    return policy_positions(traj, median_policies(traj), labels)


def histogram_figure(analysis: Any) -> Any:
    """FigureData for the iterations-per-position histogram: frame ``histogram`` (:func:`iteration_histogram`)."""
    pp = analysis._once("depth_policy_positions", lambda: positions_of(analysis))
    if isinstance(pp, NotApplicable):
        return pp
    hist = iteration_histogram(pp)
    if hist.empty:
        return NotApplicable("no position has recorded values for any rule", "fig_depth_policy_histogram")
    threshold, origin = analysis.threshold
    return FigureData({"histogram": hist}, {"depth": pp.depth, "gmm_threshold": threshold,
                                            "threshold_origin": origin})


def agreement(analysis: Any) -> AgreementResult | NotApplicable:
    """:class:`AgreementResult` of a RunAnalysis' run."""
    pp = analysis._once("depth_policy_positions", lambda: positions_of(analysis))
    if isinstance(pp, NotApplicable):
        return pp
    frame = convergence_agreement(pp)
    if frame.empty or not (frame["positions"] > 0).any():
        return NotApplicable("no position has both a rule decision and recorded hidden states",
                             "tab_depth_policy_convergence")
    return AgreementResult(frame, pp.l2_threshold, pp.layer, pp.depth)


# ------------------------------------------------------------------------------------------------ entries
# Issue 23: accuracy against compute, where the rules stop.
def _replayable(a: Any) -> str | None:
    # Replaying halting rules needs a fixed-depth run with per-iteration logits and a rule it can read.
    return replay_reason(a.run)


#: This family's declarative requirement (beside :data:`sst_interp.analyses.measurement.REQUIREMENTS`).
REQUIREMENTS = {"replayable": _replayable}

PARETO_DOC = {"run": "run directory name", "condition": "short label of the row", "policy": "fixed:D, staged:D,..., "
              "or the canonical policy string", "source": "live (recorded), oracle (staged capacity, in hindsight), "
              "replayed (a per-turn probe on the flat runs) or simulated (a rule replayed on a fixed-depth run)",
              "n_questions": "questions",
              "accuracy_pct": "accuracy (live and oracle rows; NaN for simulated)",
              "accuracy_low_pct": "lower bound: diverged questions counted wrong",
              "accuracy_high_pct": "upper bound: diverged questions counted right",
              "exact_questions": "questions whose outcome is known exactly",
              "mean_iterations": "mean iterations per generated token", "basis": "what mean_iterations is "
              "measured on", "wall_s": "wall time of the run, seconds, where measured", "pareto": "on the "
              "accuracy/iterations front of the measured rows"}
HISTOGRAM_DOC = {"rule": "kl, entropy, margin or state", "policy": "the rule at the median of its recorded values",
                 "regime": "low_overlap, stable or unlabelled (no overlap label: past the full-state window, or a "
                 "later turn)", "iterations": "where the rule stops on the full-depth trajectory",
                 "positions": "positions", "fraction": "of the rule's positions in the regime"}
AGREEMENT_DOC = {"rule": "rule", "policy": "the rule at the median of its recorded values",
                 "positions": "positions with both decisions", "agree": "fraction stopping at the same iteration",
                 "earlier": "fraction where the rule stops before the L2 convergence point",
                 "later": "fraction where it stops after", "mean_difference": "rule minus convergence, iterations",
                 "cohen_kappa": "Cohen's kappa of the two stopping iterations",
                 "spearman_rho": "Spearman correlation", "spearman_p": "its p"}


def _pareto_figure(a: Any) -> Any:
    result = a.attempt("tab_depth_pareto")
    if isinstance(result, NotApplicable):
        return result
    return FigureData({"points": result.table()}, {"notes": list(result.notes)})


def _agreement_notes(a: Any, r: Any) -> list[str]:
    return [f"convergence point: the first iteration >= 2 whose L2 change of layer {r.layer}'s state is below "
            f"{r.l2_threshold:.4g} (the median change of the run), else {r.depth}",
            "decisions read on the recorded full-depth trajectory (every position's own iterations), not on a live "
            "policy run"]


MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(name="depth_pareto", label="", title="Accuracy against mean iterations per generated token: flat "
                "depths, staged capacity, per-position policies (live, or simulated on a fixed-depth run).",
                requires=("comparison",), compute=pareto_of, tidy=lambda r: tidy.renamed(r.table(), {}),
                columns=PARETO_DOC, notes=lambda a, r: list(r.notes)),
    Measurement(name="depth_pareto_front", label="", title="Accuracy against iterations per token (the Pareto table "
                "drawn).", requires=("comparison",), compute=_pareto_figure, tidy=figure_main, columns=PARETO_DOC,
                kind="figure"),
    Measurement(name="depth_policy_histogram", label="", title="Iterations per position where each rule stops, "
                "low-overlap positions against the rest.", requires=("iterations", "replayable"),
                compute=histogram_figure, tidy=figure_main, columns=HISTOGRAM_DOC, kind="figure",
                family=sections.PER_POSITION_DEPTH, figure="policy_histogram", caption="Where each rule, at the median "
                "of its recorded values, stops on the full-depth trajectory: low-overlap (basin-shift) positions "
                "against the rest."),
    Measurement(name="depth_policy_convergence", label="", title="Where each rule stops against where L2 convergence "
                "monitoring says the state converged.", requires=("iterations", "replayable"), compute=agreement,
                tidy=lambda r: tidy.renamed(r.table(), {}), columns=AGREEMENT_DOC, notes=_agreement_notes,
                family=sections.PER_POSITION_DEPTH, caption="Each rule's stopping iteration against the L2 convergence "
                "point of the state (the first iteration whose change is below the run's median change): agreement, "
                "Cohen's kappa, Spearman."),
)
