"""Accuracy against compute: the Pareto rows of per-position depth policies (issue 23, item 4).

:func:`pareto` gives one row per condition of a run: accuracy, mean iterations per generated token and, where known,
wall time. A fixed-depth run gives its flat depths (``live``), staged capacity (``oracle``: the first correct depth
is known only in hindsight) and a threshold sweep of every rule it can replay (``simulated``). A run recorded under a
per-position or per-turn policy gives its own ``live`` row from the ``iterations`` column of ``generations``.
:func:`combine` puts several runs' rows in one table with the front recomputed.

**What a simulated row can say.** On a run recorded at fixed depth ``max`` a rule's decision at a position is read
from the recorded iterations of that position (the same numbers the live rule reads:
:mod:`sst_interp.model.halting`). That decision is the live one only until the first early exit: afterwards the
live run continues from a state and KV entry the recording lacks (see
:mod:`sst_interp.probe.policy_simulation`, whose exactness rule
:func:`~sst_interp.analyses.depth_replay.exact_questions` reproduces). So a simulated row gives

- ``exact_questions``: questions the simulation reproduces whole (no early exit, or only at the last token with the
  full-depth token); their outcome is the full-depth outcome;
- ``accuracy_low_pct`` / ``accuracy_high_pct``: the accuracy bounds that follow (the diverged questions all wrong /
  all right); never a point estimate;
- ``mean_iterations``: the mean stopping iteration over every recorded position *on the full-depth trajectory*
  (``basis = full-depth trajectory``), an estimate of the policy's compute, not a measurement of it.

Simulated rows carry no wall time. Live rows carry one when the caller knows it (runs do not record wall time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.analyses.depth_replay import QUANTILES, default_policies, exact_questions, halting_iterations, short_name
from sst_interp.analyses.depth_trajectories import Trajectories, collect_trajectories
from sst_interp.analyses.loop_manifest import fixed_run_reason, lens_reason, sweepable_rules
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.outcomes import correctness_matrix, outcome_rows
from sst_interp.kernels.results import AnalysisResult


PARETO_COLUMNS: tuple[str, ...] = (
    "run", "condition", "policy", "source", "n_questions", "accuracy_pct", "accuracy_low_pct", "accuracy_high_pct",
    "exact_questions", "mean_iterations", "basis", "wall_s", "pareto")


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
