"""Later-iteration dynamics: tab:basin_shift_activity and tab:later_iter_computation (sec:logit_dynamics (6)).

Basin-shift activity classifies every labelled position of the deepest run by the consecutive
transitions (1->2, 2->3, ...) at which it is low-overlap: sustained (every transition), 1->2 only,
1->2 plus some but not all later transitions, new at k->k+1 (stable at every earlier transition), or
never. The classes partition the positions.

Later-iteration computation has three parts:

(a) Cross-run log-prob trajectories over the three deepest runs (a -> b -> c; 2 -> 3 -> 4 in the paper)
    at positions that are pre-divergence for every consecutive run pair at once. For each tracked
    token, ``s1 = lp_b - lp_a`` and ``s2 = lp_c - lp_b``; the cumulative ratio ``r = (s1 + s2) / s1``
    (the a->c shift over the a->b shift; trajectories with ``s1 = 0`` are excluded). Classes:
    continuing ``r > 1``, retaining ``0.9 <= r <= 1``, losing ``0.5 <= r < 0.9``, reversing ``r < 0.5``;
    direction reversal: ``s2`` has the opposite sign of ``s1``. Regime: the deepest run's label.
(b) Within the deepest run: argmax changes at each consecutive iteration transition, and, for positions
    that changed at 1->2 while low-overlap at 1->2, how many change again at each later transition.
(c) Question-level stabilisation (cross-run): questions whose two shallowest runs diverge inside the
    window at position f; "further changes" when a later consecutive run pair diverges at a position <= f.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.kernels import stats
from sst_interp.kernels.results import AnalysisResult, NotApplicable
from sst_interp.analyses.logit_dynamics.records import LogitRecords
from sst_interp.analyses.logit_dynamics.regimes import check_labels
from sst_interp.analyses.logit_dynamics.tables import LogitTable, _both, _wide

BASIN, STABLE = "basin_shift", "stable"


@dataclass(frozen=True)
class BasinShiftActivity(AnalysisResult):
    """tab:basin_shift_activity.

    Args:
        depth: the run whose consecutive transitions were classified.
        n: positions classified.
        counts: ``{class name: count}`` in table order (the classes partition the positions).
    """

    label = "tab:basin_shift_activity"
    depth: int
    n: int
    counts: dict[str, int]

    def table(self) -> pd.DataFrame:
        """Columns: activity, count, percent, ci_low, ci_high (Clopper-Pearson, %)."""
        rows = []
        for name, k in self.counts.items():
            ci = stats.clopper_pearson_interval(k, self.n)
            rows.append({"activity": name, "count": k, "percent": 100.0 * k / self.n,
                         "ci_low": 100.0 * ci.low, "ci_high": 100.0 * ci.high})
        return pd.DataFrame(rows)


def basin_shift_activity(labels: pd.DataFrame, depth: int | None = None) -> BasinShiftActivity | NotApplicable:
    """Classify the deepest run's labelled positions by the consecutive transitions that are low-overlap.

    ``labels`` is a regime label table; rows with ``iter_b = iter_a + 1`` of run ``depth`` (default: the
    deepest run that has such rows) are used; positions missing a transition are skipped.
    """
    label = BasinShiftActivity.label
    lab = check_labels(labels)
    lab = lab[lab["iter_b"] == lab["iter_a"] + 1]
    if lab.empty:
        return NotApplicable("no labels for consecutive iteration transitions (i -> i+1)", label)
    depth = int(lab["depth"].max()) if depth is None else int(depth)
    lab = lab[lab["depth"] == depth]
    n_trans = depth - 1
    if n_trans < 2:
        return NotApplicable(f"run depth {depth} has {n_trans} transition(s); need depth >= 3", label)
    wide = lab.pivot_table(index=["question_id", "turn", "position"], columns="iter_a", values="low_overlap",
                           aggfunc="first")
    wide = wide.reindex(columns=range(1, depth)).dropna()
    if wide.empty:
        return NotApplicable(f"no position of run depth {depth} has labels for every transition", label)
    v = wide.to_numpy(bool)  # [positions, transitions]
    first, later = v[:, 0], v[:, 1:]
    counts: dict[str, int] = {
        f"sustained (all {n_trans} transitions)": int(v.all(1).sum()),
        "at 1->2 only": int((first & ~later.any(1)).sum()),
        "at 1->2 and some later (not all)": int((first & later.any(1) & ~later.all(1)).sum()),
    }
    onset = np.where(v.any(1), v.argmax(1), -1)
    for t in range(1, n_trans):
        counts[f"new at {t + 1}->{t + 2} (stable before)"] = int((onset == t).sum())
    counts["no basin shift at any transition"] = int((~v.any(1)).sum())
    return BasinShiftActivity(depth, len(v), counts)


class LaterIterComputation(LogitTable):
    """tab:later_iter_computation (columns ``basin_shift`` and ``stable``; spanning rows repeat a value)."""

    label = "tab:later_iter_computation"


def _trajectory_rows(traj: pd.DataFrame, groups: list[str], seed: int, n_resamples: int
                     ) -> list[tuple[str, dict[str, float]]]:
    t = traj[traj["low_overlap"].notna() & (traj["s1"] != 0)]
    parts = {BASIN: t[t["low_overlap"].astype(bool)], STABLE: t[~t["low_overlap"].astype(bool)]}
    if any(p.empty for p in parts.values()):
        return []
    ratio = {g: ((p["s1"] + p["s2"]) / p["s1"]).to_numpy(float) for g, p in parts.items()}
    s1 = {g: p["s1"].to_numpy(float) for g, p in parts.items()}
    s2 = {g: p["s2"].to_numpy(float) for g, p in parts.items()}
    cis = {g: stats.bootstrap_ci(r, np.mean, n_resamples=n_resamples, seed=seed) for g, r in ratio.items()}
    all_ratio = np.concatenate(list(ratio.values()))
    mw = stats.mann_whitney(ratio[BASIN], ratio[STABLE]).pvalue
    return [
        ("trajectories (logits)", {g: r.size for g, r in ratio.items()}),
        ("trajectories excluded (zero first shift)", _both(int((traj["s1"] == 0).sum()), groups)),
        ("cumulative ratio mean", {g: float(r.mean()) for g, r in ratio.items()}),
        ("cumulative ratio mean CI low", {g: cis[g].low for g in groups}),
        ("cumulative ratio mean CI high", {g: cis[g].high for g in groups}),
        ("cumulative ratio median", {g: float(np.median(r)) for g, r in ratio.items()}),
        ("continuing same direction, r > 1 (%)", {g: 100.0 * float((r > 1).mean()) for g, r in ratio.items()}),
        ("retaining within 10%, 0.9 <= r <= 1 (%)",
         {g: 100.0 * float(((r >= 0.9) & (r <= 1)).mean()) for g, r in ratio.items()}),
        ("losing 10-50%, 0.5 <= r < 0.9 (%)",
         {g: 100.0 * float(((r >= 0.5) & (r < 0.9)).mean()) for g, r in ratio.items()}),
        ("reversing > 50%, r < 0.5 (%)", {g: 100.0 * float((r < 0.5).mean()) for g, r in ratio.items()}),
        ("direction reversal rate (%)",
         {g: 100.0 * float((np.sign(s2[g]) == -np.sign(s1[g])).mean()) for g in groups}),
        ("direction reversal rate, all (%)",
         _both(100.0 * float((np.sign(np.concatenate(list(s2.values())))
                              == -np.sign(np.concatenate(list(s1.values())))).mean()), groups)),
        ("cumulative ratio mean, all positions", _both(float(all_ratio.mean()), groups)),
        ("regime difference Mann-Whitney p", _both(mw, groups)),
    ]


def _path_rows(recs: LogitRecords, groups: list[str]) -> list[tuple[str, dict[str, float]]]:
    paths = recs.paths
    if paths.empty:
        return []
    wide = paths.pivot_table(index=["question_id", "position"], columns="iteration", values="argmax", aggfunc="first")
    its = sorted(wide.columns)
    if len(its) < 3:
        return []
    v = wide.to_numpy(np.int64)
    valid = (v >= 0).all(1)
    v = v[valid]
    changes = [(v[:, i] != v[:, i + 1]) for i in range(len(its) - 1)]
    rows = [(f"argmax changes at {its[i]}->{its[i + 1]} (deepest run)", _both(int(c.sum()), groups))
            for i, c in enumerate(changes)]
    rows.append(("argmax changes at later transitions", _both(int(sum(c.sum() for c in changes[1:])), groups)))
    if recs.labels is None:
        return rows
    lab = check_labels(recs.labels)
    deep = max(recs.depths)
    lab = lab[(lab["depth"] == deep) & (lab["iter_a"] == its[0]) & (lab["iter_b"] == its[1])]
    low = wide[valid].reset_index()[["question_id", "position"]].merge(
        lab[["question_id", "position", "low_overlap"]], on=["question_id", "position"], how="left")
    basin_first = changes[0] & low["low_overlap"].fillna(False).to_numpy(bool)
    n = int(basin_first.sum())
    rows.append(("basin-shift positions changed at first transition", _both(n, groups)))
    if n:
        for i, c in enumerate(changes[1:], start=1):
            k = int((c & basin_first).sum())
            ci = stats.clopper_pearson_interval(k, n)
            name = f"re-changed at {its[i]}->{its[i + 1]}"
            rows += [(f"{name}", _both(k, groups)), (f"{name} (%)", _both(100.0 * k / n, groups)),
                     (f"{name} CI low (%)", _both(100.0 * ci.low, groups)),
                     (f"{name} CI high (%)", _both(100.0 * ci.high, groups))]
    return rows


def _stabilisation_rows(recs: LogitRecords, groups: list[str]) -> list[tuple[str, dict[str, float]]]:
    div = recs.divergence
    if div.empty or len(recs.depths) < 3:
        return []
    wide = div.pivot_table(index="question_id", columns="depth_a", values="first_divergence", aggfunc="first")
    firsts = sorted(wide.columns)
    f0 = wide[firsts[0]].to_numpy(np.int64)
    later = wide[firsts[1:]].to_numpy(np.int64)
    changed = f0 >= 0
    n = int(changed.sum())
    if n == 0:
        return []
    further = changed & ((later >= 0) & (later <= f0[:, None])).any(1)
    k = int(further.sum())
    return [("questions changed at the first run pair", _both(n, groups)),
            ("then stabilised", _both(n - k, groups)), ("then stabilised (%)", _both(100.0 * (n - k) / n, groups)),
            ("further changes", _both(k, groups)), ("further changes (%)", _both(100.0 * k / n, groups))]


def later_iter_computation(recs: LogitRecords, n_resamples: int = 10_000, seed: int = stats.DEFAULT_SEED
                           ) -> LaterIterComputation | NotApplicable:
    """tab:later_iter_computation from records of a run with three or more depths (see module docstring)."""
    label = LaterIterComputation.label
    if len(recs.depths) < 3:
        return NotApplicable(f"run has depths {list(recs.depths)}; later-iteration dynamics need three or more",
                             label)
    groups = [BASIN, STABLE]
    rows: list[tuple[str, dict[str, Any]]] = []
    if not recs.trajectories.empty:
        rows += _trajectory_rows(recs.trajectories, groups, seed, n_resamples)
    rows += _path_rows(recs, groups)
    rows += _stabilisation_rows(recs, groups)
    if not rows:
        return NotApplicable("no trajectories, iteration paths or divergences to summarise", label)
    counts = {g: int(rows[0][1][g]) for g in groups} if rows[0][0] == "trajectories (logits)" else {}
    return LaterIterComputation(_wide(rows, groups), counts)
