"""L2 convergence monitoring and why it fails (paper sec:halting_probe, fig:convergence_monitoring).

The L2 delta of a position between successive iterations is ``||h_{i+1} - h_i||_2`` of its hidden state at one
layer (default: the last). Two questions, both answered with scipy/scikit-learn statistics:

(a) Does the delta profile separate difficulty groups? Questions are grouped by their *correct depth*, the
    smallest flat depth at which they are correct (``never`` when none); per transition i -> i+1 a Kruskal-Wallis
    test compares the groups' per-question deltas.
(b) Does the current delta predict the next step's outcome? At decision iteration i (2 <= i, with flat depths i and
    i+1 recorded) the current delta is ``||h_i - h_{i-1}||`` and the next step *improves* (wrong at flat depth i,
    right at i+1), *degrades* (right, then wrong) or leaves correctness unchanged. Mann-Whitney U compares the
    current deltas of improving and degrading steps, and AUROC scores the current delta as a predictor of
    "degrades" against "improves".

Statistics use one value per (question, decision) -- the mean over the selected positions -- so positions of one
question are not counted as independent samples; the per-position points are kept for the figure.
Hidden states come from the deepest run (it holds every iteration).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from scipy import stats

from sst_interp.analyses import hidden_pass, sections
from sst_interp.analyses.figure_data import FigureData
from sst_interp.analyses.hidden_pass import l2_deltas
from sst_interp.analyses.loop_manifest import declared_state_layer
from sst_interp.analyses.measurement import QUANTITY_DOC, Measurement, figure_main, quantities
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.outcomes import NEVER, first_correct_depth
from sst_interp.kernels.results import AnalysisResult, NotApplicable, single_depth

if TYPE_CHECKING:
    from sst_interp.store import Run


def step_outcomes(depths: Sequence[int], correct: np.ndarray) -> dict[int, np.ndarray]:
    """{i: [Q] outcome of going from flat depth i to i+1} for every i with both recorded:
    "improves", "degrades" or "same"."""
    at = {d: j for j, d in enumerate(depths)}
    correct = np.asarray(correct, dtype=bool)
    out: dict[int, np.ndarray] = {}
    for d in depths:
        if d + 1 in at:
            now, nxt = correct[:, at[d]], correct[:, at[d + 1]]
            out[d] = np.where(~now & nxt, "improves", np.where(now & ~nxt, "degrades", "same"))
    return out


@dataclass(frozen=True)
class ConvergenceResult(AnalysisResult):
    """L2 deltas and their (lack of) predictive power.

    Args:
        question_ids: [Q].
        positions: [P] positions used.
        layer: the layer of the hidden states.
        deltas: [Q, P, T] L2 deltas, T = transitions 1->2 .. (I-1)->I.
        groups: [Q] first correct depth (:data:`~sst_interp.kernels.outcomes.NEVER` when never correct).
        points: per (question, position, decision iteration): current_delta, next_delta, outcome.
        kruskal: per transition: statistic and p-value across correct-depth groups (NaN-free; absent when fewer
            than two groups have data).
        mann_whitney_p: improves vs degrades on per-question current deltas (None without both outcomes).
        mann_whitney_u: its U statistic.
        auroc_degrade: AUROC of the current delta for degrades (1) vs improves (0) (None without both).
        n_improves: decisions that improve; n_degrades: decisions that degrade; n_same: unchanged.
    """

    question_ids: tuple[str, ...]
    positions: np.ndarray
    layer: int
    deltas: np.ndarray
    groups: np.ndarray
    points: pd.DataFrame
    kruskal: pd.DataFrame
    mann_whitney_p: float | None
    mann_whitney_u: float | None
    auroc_degrade: float | None
    n_improves: int
    n_degrades: int
    n_same: int
    label = "fig:convergence_monitoring"

    def profile(self) -> pd.DataFrame:
        """Panel (a): per correct-depth group and transition: n, mean, median, p25, p75 of per-position deltas."""
        rows = []
        for g in sorted(set(self.groups.tolist())):
            sel = self.deltas[self.groups == g]  # [q, P, T]
            for t in range(self.deltas.shape[2]):
                v = sel[:, :, t].reshape(-1)
                v = v[~np.isnan(v)]
                if v.size:
                    rows.append({"correct_depth": "never" if g == NEVER else str(g), "transition": f"{t + 1}->{t + 2}",
                                 "n": int(v.size), "mean": float(v.mean()), "median": float(np.median(v)),
                                 "p25": float(np.percentile(v, 25)), "p75": float(np.percentile(v, 75))})
        return pd.DataFrame(rows)

    def table(self) -> pd.DataFrame:
        """Summary: outcome counts and the statistics of panel (b), then the Kruskal-Wallis rows of panel (a)."""
        rows = [("decisions that improve", float(self.n_improves)), ("decisions that degrade", float(self.n_degrades)),
                ("decisions unchanged", float(self.n_same))]
        if self.mann_whitney_p is not None:
            rows += [("Mann-Whitney U (current delta, improves vs degrades)", float(self.mann_whitney_u)),
                     ("Mann-Whitney p", self.mann_whitney_p),
                     ("AUROC current delta -> degrades vs improves", float(self.auroc_degrade))]
        for _, r in self.kruskal.iterrows():
            rows += [(f"Kruskal-Wallis H across correct depths, transition {r['transition']}", float(r["statistic"])),
                     (f"Kruskal-Wallis p, transition {r['transition']}", float(r["p_value"]))]
        return pd.DataFrame(rows, columns=["metric", "value"])


def convergence_from_arrays(deltas: np.ndarray, depths: Sequence[int], correct: np.ndarray,
                            question_ids: Sequence[str] | None = None, positions: np.ndarray | None = None,
                            layer: int = -1) -> ConvergenceResult | NotApplicable:
    """The analysis from ``deltas: [Q, P, T]`` (T = I-1 transitions of the deepest run) and ``correct: [Q, D]``."""
    deltas = np.asarray(deltas, dtype=np.float64)
    if deltas.ndim != 3 or deltas.shape[2] < 1:
        return NotApplicable("need at least two iterations to measure L2 deltas", "fig:convergence_monitoring")
    depths = list(depths)
    q, p, t = deltas.shape
    ids = tuple(question_ids) if question_ids is not None else tuple(str(i) for i in range(q))
    positions = np.arange(p) if positions is None else np.asarray(positions)
    groups = first_correct_depth(depths, correct)
    outcomes = step_outcomes(depths, correct)
    points, per_q = [], []
    for i, outcome in outcomes.items():
        if i < 2 or i > t:  # needs the current delta (i-1 -> i) and the next delta (i -> i+1)
            continue
        cur, nxt = deltas[:, :, i - 2], deltas[:, :, i - 1]
        for qi in range(q):
            keep = ~np.isnan(cur[qi])
            if not keep.any():
                continue
            per_q.append((float(cur[qi][keep].mean()), str(outcome[qi])))
            for pj in np.flatnonzero(keep):
                points.append({"question_id": ids[qi], "position": int(positions[pj]), "iteration": i,
                               "current_delta": float(cur[qi, pj]), "next_delta": float(nxt[qi, pj]),
                               "outcome": str(outcome[qi])})
    if not per_q:
        return NotApplicable("no decision iteration has both a current delta and a recorded next flat depth "
                             "(need depths i-1 < i < i+1 with the deepest run holding iteration i+1)",
                             "fig:convergence_monitoring")
    cur_values = np.array([v for v, _ in per_q])
    labels = np.array([o for _, o in per_q])
    if not (labels != "same").any():
        changes = {i: int((o != "same").sum()) for i, o in outcomes.items() if (o != "same").any()}
        where = ("no question changes correctness between consecutive flat depths" if not changes else
                 "correctness changes only at " + ", ".join(f"{i}->{i + 1} ({n} question(s))" for i, n in changes.items())
                 + ", where there is no earlier delta to decide from (a decision at depth i needs the delta i-1 -> i)")
        return NotApplicable(f"{where}; there is no outcome for the L2 delta to predict", "fig:convergence_monitoring")
    imp, deg = cur_values[labels == "improves"], cur_values[labels == "degrades"]
    mw_p = mw_u = auroc = None
    if imp.size and deg.size:
        res = stats.mannwhitneyu(imp, deg, alternative="two-sided")
        mw_p, mw_u = float(res.pvalue), float(res.statistic)
        sel = labels != "same"
        from sklearn.metrics import roc_auc_score

        auroc = float(roc_auc_score((labels[sel] == "degrades").astype(int), cur_values[sel]))
    kr = []
    per_question = np.nanmean(deltas, axis=1)  # [Q, T]
    for tt in range(t):
        samples = [per_question[groups == g, tt] for g in sorted(set(groups.tolist()))]
        samples = [s[~np.isnan(s)] for s in samples]
        samples = [s for s in samples if s.size]
        if len(samples) >= 2 and np.unique(np.concatenate(samples)).size > 1:
            h = stats.kruskal(*samples)
            kr.append({"transition": f"{tt + 1}->{tt + 2}", "groups": len(samples), "statistic": float(h.statistic),
                       "p_value": float(h.pvalue)})
    kruskal = pd.DataFrame(kr, columns=["transition", "groups", "statistic", "p_value"])
    return ConvergenceResult(ids, positions, int(layer), deltas, groups, pd.DataFrame(points), kruskal, mw_p, mw_u,
                             auroc, int((labels == "improves").sum()), int((labels == "degrades").sum()),
                             int((labels == "same").sum()))


def convergence_monitoring(run: Run, layer: int | None = None, positions: Sequence[int] | None = None,
                           depth: int | None = None, turn: int = 0) -> ConvergenceResult | NotApplicable:
    """fig:convergence_monitoring from a run: L2 deltas of the deepest run (or ``depth``) at ``layer`` (default
    the last) over ``positions`` (default every full-window position), against correctness at every flat depth.
    Streams one question at a time (only the chosen layer is decoded into the arrays kept); questions whose deltas
    an earlier analysis of the same Run object noted (:mod:`sst_interp.analyses.hidden_pass`) are not read again."""
    depths = list(run.depths)
    refused = single_depth(depths, "fig:convergence_monitoring", "convergence needs two or more")
    if refused is not None:
        return refused
    depth = depths[-1] if depth is None else int(depth)
    if depth not in depths:
        raise UsageError(f"depth {depth} is not in the run (depths {depths})")
    if layer is None:  # a family's carried state (its last layer may not loop), else the last layer
        declared = declared_state_layer(run.manifest)
        layer = run.num_layers - 1 if declared is None else declared
    layer = int(layer)
    if not 0 <= layer < run.num_layers:
        raise UsageError(f"layer {layer} is outside 0..{run.num_layers - 1}")
    sets = [set(run.question_ids(d)) for d in depths]
    ids = [q for q in run.question_ids(depth) if all(q in s for s in sets)]
    if not ids:
        return NotApplicable("no question is complete at every depth", "fig:convergence_monitoring")
    gens = run.generations()
    gens = gens[gens["turn"] == turn]
    correct_at = {(q, int(d)): bool(c) for q, d, c in zip(gens["question_id"], gens["depth"], gens["correct"])}
    correct = np.array([[correct_at.get((q, d), False) for d in depths] for q in ids], dtype=bool)
    rows: dict[str, np.ndarray] = {}
    where: dict[str, np.ndarray] = {}
    # deltas noted by an earlier pass over the same blocks of this Run (top-k overlap reads them whole): the same
    # numbers, so only the questions not noted are read here
    noted = hidden_pass.noted_l2_deltas(run, depth, turn, layer) if positions is None and turn is not None else {}
    for q in ids:
        if q in noted:
            where[q], rows[q] = noted[q]
    missing = [q for q in ids if q not in noted]
    for block in run.hidden(depth, question_ids=missing, turn=turn, layers=[layer], positions=positions) \
            if missing else ():
        rows[block.question_id] = l2_deltas(block.values[:, :, 0, :])  # [P, I-1]
        where[block.question_id] = block.positions
    grid = {int(p) for w in where.values() for p in w.tolist()}
    pos = np.array(sorted(grid), dtype=np.int64)
    t = depth - 1
    deltas = np.full((len(ids), pos.size, t), np.nan)
    col = {int(p): j for j, p in enumerate(pos)}
    for qi, q in enumerate(ids):
        if q in rows:
            for j, p in enumerate(where[q].tolist()):
                deltas[qi, col[p], :rows[q].shape[1]] = rows[q][j]
    return convergence_from_arrays(deltas, depths, correct, ids, pos, layer)


# ------------------------------------------------------------------------------------------------ figure
# data and entries (fig:convergence_monitoring)
def monitoring_figure(analysis: Any) -> FigureData | NotApplicable:
    """fig:convergence_monitoring: per-position L2 deltas by correct depth and the decision points."""
    result = analysis.convergence()
    if isinstance(result, NotApplicable):
        return result
    deltas = result.deltas  # [Q, P, T]
    q, p, t = deltas.shape
    traces = pd.DataFrame({
        "question_id": np.repeat(np.array(result.question_ids, dtype=object), p * t),
        "position": np.tile(np.repeat(result.positions, t), q),
        "transition": np.tile(np.arange(1, t + 1), q * p),
        "delta": deltas.reshape(-1),
        "correct_depth": np.repeat(result.groups, p * t),
    }).dropna(subset=["delta"])
    return FigureData({"traces": traces, "points": result.points, "profile": result.profile()}, {
        "layer": result.layer, "auroc": result.auroc_degrade, "mann_whitney_p": result.mann_whitney_p,
        "n_improves": result.n_improves, "n_degrades": result.n_degrades}, "traces")


MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(name="convergence_monitoring", label="", title="Tests behind fig:convergence_monitoring: L2 of the "
                "state does not tell when to stop.", requires=("iterations",), compute=lambda a: a.convergence(),
                tidy=quantities("metric"), columns=QUANTITY_DOC,
                notes=lambda a, r: [f"L2 deltas at layer {r.layer}; one value per (question, decision) in the "
                                    "tests"], family=sections.PRECISION_AND_CONVERGENCE, caption="Tests behind the "
                "convergence figure: Kruskal-Wallis across correct depths per transition, and Mann-Whitney / AUROC of "
                "the current delta for improving vs degrading steps."),
    Measurement(name="convergence_figure", label="fig:convergence_monitoring", title="L2 delta between successive "
                "iterations by correct depth.", requires=("iterations",), compute=monitoring_figure, tidy=figure_main,
                columns={"question_id": "question", "position": "generated position", "transition": "iteration i -> "
                         "i+1", "delta": "L2 change of the state", "correct_depth": "the depth the question is first "
                         "right at"}, kind="figure", family=sections.PRECISION_AND_CONVERGENCE, figure="convergence",
                caption="L2 delta between successive iterations by correct depth (a), and the current delta against "
                "the next step's outcome (b): L2 does not tell when to stop."),
)
