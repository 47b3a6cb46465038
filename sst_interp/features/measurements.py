"""The sparse dictionaries' measurements of a run, as catalogue entries: what the states hold, feature by feature.

``a = study.open(run, dictionary=PATH)`` (a dictionary folder of ``python -m sst_interp.features train``, shared or
per-iteration), then:

- ``a.feature_sets()``: the active features of every encoded state, one row per (question, turn, position,
  iteration, feature) with its activation (:meth:`~sst_interp.features.dictionary.FeatureActivations.tidy`);
- ``a.feature_basin_shifts()``: per (question, turn, position) and consecutive iterations (i, i+1), the Jaccard
  distance of the two active feature sets beside the paper's top-k overlap of the same two states
  (:func:`~sst_interp.analyses.overlap.within_run_overlap`, app:topk_overlap); the table gives their Spearman
  correlation per pair of iterations;
- ``a.feature_trajectories()``: for each state's top features (the largest activation at any iteration), the
  activation at every iteration, 0 where inactive; the report draws it with the shifts.

Feature identity across iterations needs one dictionary for all of them (``--layout shared``): with per-iteration
dictionaries feature f is another direction at each iteration, so the shifts and trajectories are refused with that
reason. The activations are encoded once per analysis object and shared by the three entries. Importing this module
loads neither SAELens nor torch (the catalogue imports it); the dictionary is loaded through the lazy package.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from sst_interp import features
from sst_interp.analyses import sections
from sst_interp.analyses.figure_data import FigureData
from sst_interp.analyses.measurement import Frame, Measurement
from sst_interp.analyses.overlap import within_run_overlap
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.results import NotApplicable

#: The columns that name one state.
STATE = ("question_id", "turn", "position")

#: How many features of each state the trajectories follow (the largest by their maximum over the iterations).
TOP_FEATURES = 5

#: How many features the report's heat map shows (those most often among a state's top features).
SHOWN_FEATURES = 16

FEATURE_SET_DOC = {
    "question_id": "the question", "depth": "the run depth whose states were encoded (the dictionary's)",
    "turn": "model turn, from 0", "position": "the generated position (0 = the last prompt token)",
    "iteration": "the iteration, from 1", "feature": "the dictionary feature (its index)",
    "activation": "the feature's activation (float32; only active features have rows)",
}
SET_SUMMARY = ("iteration", "states", "l0_mean", "features_active", "activation_mean")

SHIFT_DOC = {
    "question_id": "the question", "turn": "model turn, from 0", "position": "the generated position",
    "iteration_a": "the earlier iteration i", "iteration_b": "the next iteration i+1",
    "active_a": "features active at i", "active_b": "features active at i+1",
    "shared": "features active at both", "jaccard_distance": "1 - shared / |union| (0 when both sets are empty)",
    "topk_overlap": "the paper's top-k overlap of the same two states at the dictionary's layer (app:topk_overlap)",
}
SHIFT_SUMMARY = ("iteration_a", "iteration_b", "states", "jaccard_distance_mean", "topk_overlap_mean",
                 "spearman_rho", "spearman_p")

TRAJECTORY_DOC = {
    "question_id": "the question", "turn": "model turn, from 0", "position": "the generated position",
    "rank": f"the feature's rank among the state's top {TOP_FEATURES} (0 = the largest maximum activation)",
    "feature": "the dictionary feature", "iteration": "the iteration, from 1",
    "activation": "its activation at that iteration (0 where inactive)",
}


# ------------------------------------------------------------------------------------------------ requirements
def given(a: Any) -> str | None:
    """Requirement ``dictionary``: the analysis was opened with one."""
    if getattr(a, "dictionary", None) is None:
        return ("no sparse dictionary given: study.open(run, dictionary=PATH) (the report: --dictionary PATH), a "
                "folder of python -m sst_interp.features train")
    return None


REQUIREMENTS = {"dictionary": given}


# ------------------------------------------------------------------------------------------------ shared steps
def dictionaries(a: Any) -> Any:
    """The analysis' :class:`~sst_interp.features.dictionary.DictionarySet`, loaded once."""
    return a.memo("features:dictionaries", lambda: features.DictionarySet.load(a.dictionary))


def activations(a: Any) -> tuple[Any, Any]:
    """(the site, :class:`~sst_interp.features.dictionary.FeatureActivations` of every state the dictionary covers),
    encoded once per analysis (UsageError: the dictionary does not fit the run)."""
    def build() -> tuple[Any, Any]:
        loaded = dictionaries(a)
        return loaded.site(a.run), loaded.encode_run(a.run)

    return a.memo("features:activations", build)


def _shared(a: Any, what: str) -> None:
    loaded = dictionaries(a)
    if loaded.layout != "shared":
        raise UsageError(f"{loaded.path} is a per-iteration dictionary set, so feature f is another direction at each "
                         f"iteration and {what} compares nothing; train one with --layout shared")


# ------------------------------------------------------------------------------------------------ feature sets
def set_summary(frame: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """Per iteration: ``states`` encoded, ``l0_mean`` (active features per state), ``features_active`` (distinct
    features active in any state) and ``activation_mean`` (over active features)."""
    states = rows.groupby("iteration").size().rename("states")
    if frame.empty:
        table = states.reset_index().assign(l0_mean=0.0, features_active=0, activation_mean=np.nan)
        return table[list(SET_SUMMARY)]
    per = frame.groupby("iteration").agg(active=("feature", "size"), features_active=("feature", "nunique"),
                                         activation_mean=("activation", "mean"))
    table = pd.concat([states, per], axis=1).fillna({"active": 0, "features_active": 0}).reset_index()
    table["l0_mean"] = table["active"] / table["states"]
    table["features_active"] = table["features_active"].astype(np.int64)
    return table[list(SET_SUMMARY)]


class FeatureSets(Frame):
    """The active features of every encoded state (:attr:`frame`) and their summary per iteration as the table."""

    def __init__(self, frame: pd.DataFrame, rows: pd.DataFrame) -> None:
        super().__init__(frame)
        self.rows = rows

    def table(self) -> pd.DataFrame:
        return set_summary(self.frame, self.rows)


def feature_sets(a: Any) -> FeatureSets:
    """The active features per (question, turn, position, iteration), with their activations."""
    site, acts = activations(a)
    tidy = acts.tidy()
    tidy.insert(1, "depth", np.int64(site.depth))
    return FeatureSets(tidy[list(FEATURE_SET_DOC)], acts.rows)


# ------------------------------------------------------------------------------------------------ basin shifts
def jaccard_shifts(acts: Any) -> pd.DataFrame:
    """Per state and consecutive iterations (i, i+1) both encoded: the active sets' sizes, shared features and
    Jaccard distance (:data:`SHIFT_DOC`, without ``topk_overlap``)."""
    rows = acts.rows.reset_index(drop=True)
    active = (acts.activations != 0).tocsr()
    index = {key: n for n, key in enumerate(zip(rows["question_id"], rows["turn"], rows["position"],
                                                rows["iteration"]))}
    out = []
    for (question, turn, position, iteration), n in index.items():
        m = index.get((question, turn, position, iteration + 1))
        if m is None:
            continue
        a_set, b_set = set(active[n].indices), set(active[m].indices)
        union = len(a_set | b_set)
        shared = len(a_set & b_set)
        out.append((question, int(turn), int(position), int(iteration), int(iteration) + 1, len(a_set), len(b_set),
                    shared, 1.0 - shared / union if union else 0.0))
    columns = [c for c in SHIFT_DOC if c != "topk_overlap"]
    frame = pd.DataFrame(out, columns=columns)
    return frame.sort_values(["question_id", "turn", "position", "iteration_a"], kind="stable").reset_index(drop=True)


def topk_overlaps(a: Any, site: Any, pairs: pd.DataFrame) -> pd.Series:
    """The paper's within-run top-k overlap of each row's two states at the site's layer (NaN where the overlap
    has no value), aligned with ``pairs``."""
    values = np.full(len(pairs), np.nan)
    for (turn, iteration), group in pairs.groupby(["turn", "iteration_a"], sort=True):
        result = within_run_overlap(a.run, depth=site.depth, iteration_a=int(iteration),
                                    iteration_b=int(iteration) + 1, turn=int(turn),
                                    positions=sorted(group["position"].unique().tolist()),
                                    question_ids=sorted(group["question_id"].unique().tolist()))
        if isinstance(result, NotApplicable):
            raise UsageError(f"the top-k overlap of iterations {iteration} and {iteration + 1}: {result.reason}")
        layer = np.flatnonzero(np.asarray(result.layers) == site.layer)
        if layer.size == 0:
            raise UsageError(f"the run's top-k overlap has no layer {site.layer} (layers {list(result.layers)})")
        q_at = {q: n for n, q in enumerate(result.question_ids)}
        p_at = {int(p): n for n, p in enumerate(result.positions)}
        for row, question, position in zip(group.index, group["question_id"], group["position"]):
            q, p = q_at.get(question), p_at.get(int(position))
            if q is not None and p is not None:
                values[row] = result.values[q, p, layer[0]]
    return pd.Series(values, index=pairs.index, name="topk_overlap")


def shift_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (i, i+1), and over all pairs together (``iteration_a`` = ``iteration_b`` = 0) when there are several: the
    states, the mean Jaccard distance and top-k overlap, and the Spearman correlation of the two over the states
    (NaN with fewer than 3 states or a constant column)."""
    out = []
    groups = [((int(i), int(j)), g) for (i, j), g in frame.groupby(["iteration_a", "iteration_b"], sort=True)]
    if len(groups) > 1:
        groups.append(((0, 0), frame))
    for (i, j), group in groups:
        both = group.dropna(subset=["topk_overlap"])
        rho, p = np.nan, np.nan
        if len(both) >= 3 and both["jaccard_distance"].nunique() > 1 and both["topk_overlap"].nunique() > 1:
            test = stats.spearmanr(both["jaccard_distance"], both["topk_overlap"])
            rho, p = float(test.statistic), float(test.pvalue)
        out.append((i, j, len(group), float(group["jaccard_distance"].mean()), float(both["topk_overlap"].mean())
                    if len(both) else np.nan, rho, p))
    return pd.DataFrame(out, columns=list(SHIFT_SUMMARY))


class FeatureShifts(Frame):
    """The Jaccard distance and top-k overlap of each state's consecutive iterations (:attr:`frame`) and their
    summary with the Spearman correlation per pair of iterations (and over all pairs: iterations 0, 0)."""

    def table(self) -> pd.DataFrame:
        return shift_summary(self.frame)


def feature_basin_shifts(a: Any) -> FeatureShifts:
    """Basin shifts as feature-set change, beside the top-k overlap of the same states."""
    _shared(a, "a feature-set change")
    site, acts = activations(a)
    pairs = jaccard_shifts(acts)
    pairs["topk_overlap"] = topk_overlaps(a, site, pairs) if len(pairs) else pd.Series(dtype=np.float64)
    return FeatureShifts(pairs[list(SHIFT_DOC)])


def _shift_notes(a: Any, result: Any) -> list[str]:
    site, _ = activations(a)
    return [f"dictionary {dictionaries(a).path} ({dictionaries(a).layout}) at layer {site.layer}, depth "
            f"{site.depth}; iterations 0, 0 is every pair together. A basin shift is a large Jaccard distance and a "
            f"low top-k overlap, so the two agree when rho is negative."]


# ------------------------------------------------------------------------------------------------ trajectories
def trajectories(acts: Any, top: int = TOP_FEATURES) -> pd.DataFrame:
    """Per state, its ``top`` features by maximum activation over the iterations, with the activation at every
    encoded iteration (0 where inactive): :data:`TRAJECTORY_DOC`."""
    tidy = acts.tidy()
    columns = list(TRAJECTORY_DOC)
    if tidy.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "question_id" else np.float32 if c == "activation"
                                          else np.int64) for c in columns})
    peak = tidy.groupby([*STATE, "feature"], sort=True)["activation"].max().reset_index()
    peak = peak.sort_values([*STATE, "activation", "feature"], ascending=[True, True, True, False, True],
                            kind="stable")
    peak["rank"] = peak.groupby(list(STATE)).cumcount()
    chosen = peak[peak["rank"] < top][[*STATE, "feature", "rank"]]
    iterations = acts.rows[[*STATE, "iteration"]].drop_duplicates()
    grid = chosen.merge(iterations, on=list(STATE))
    frame = grid.merge(tidy[[*STATE, "iteration", "feature", "activation"]], how="left",
                       on=[*STATE, "iteration", "feature"])
    frame["activation"] = frame["activation"].fillna(0.0).astype(np.float32)
    frame = frame.astype({"turn": np.int64, "position": np.int64, "rank": np.int64, "feature": np.int64,
                          "iteration": np.int64})
    return frame.sort_values([*STATE, "rank", "iteration"], kind="stable").reset_index(drop=True)[columns]


def common_features(frame: pd.DataFrame, shown: int = SHOWN_FEATURES) -> pd.DataFrame:
    """The ``shown`` features most often among a state's top features, with their mean activation per iteration
    over every state (0 where inactive): ``feature``, ``states`` (how often it is a top feature), ``iteration``,
    ``activation_mean``."""
    if frame.empty:
        return pd.DataFrame(columns=["feature", "states", "iteration", "activation_mean"])
    counts = frame[frame["iteration"] == frame["iteration"].min()].groupby("feature").size().rename("states")
    keep = counts.sort_values(ascending=False, kind="stable").head(shown)
    states = frame[list(STATE)].drop_duplicates().shape[0]
    sums = frame[frame["feature"].isin(keep.index)].drop_duplicates([*STATE, "feature", "iteration"]) \
        .groupby(["feature", "iteration"])["activation"].sum().rename("activation_sum").reset_index()
    sums["activation_mean"] = sums["activation_sum"] / states
    out = sums.merge(keep.reset_index(), on="feature")
    order = {f: n for n, f in enumerate(keep.index)}
    out = out.assign(order=out["feature"].map(order)).sort_values(["order", "iteration"])
    return out[["feature", "states", "iteration", "activation_mean"]].reset_index(drop=True)


def feature_trajectories(a: Any) -> FigureData:
    """Each state's top features followed through the loop, the features most often on top (mean activation per
    iteration) and the basin shifts beside the top-k overlap: the report's figure."""
    _shared(a, "following a feature through the loop")
    site, acts = activations(a)
    frame = trajectories(acts)
    shifts = a.computed("feature_basin_shifts")
    if isinstance(shifts, NotApplicable):
        raise UsageError(shifts.reason)
    summary = shifts.table()
    overall = summary[summary["iteration_a"] == 0]
    rho = float((overall if len(overall) else summary)["spearman_rho"].iloc[0]) if len(summary) else float("nan")
    meta = {"layer": site.layer, "depth": site.depth, "top": TOP_FEATURES, "width": dictionaries(a).meta.width,
            "states": int(acts.rows[list(STATE)].drop_duplicates().shape[0]), "spearman_rho": rho}
    return FigureData({"trajectories": frame, "common": common_features(frame), "shifts": shifts.frame}, meta,
                      main="trajectories")


MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(name="feature_sets", label="", title="The active features of each state per iteration, with their "
                "activations (a sparse dictionary).", requires=("dictionary",), compute=feature_sets,
                tidy=lambda result: result.frame, columns=FEATURE_SET_DOC, family=sections.FEATURES,
                inputs=("run", "dictionary"),
                caption="What the states hold, feature by feature: per iteration, the states the dictionary encoded, "
                "the mean number of active features (L0), the distinct features active in any state and their mean "
                "activation; the feature by feature rows are study.open(run, dictionary=PATH).feature_sets()."),
    Measurement(name="feature_basin_shifts", label="", title="Basin shifts as feature-set change: the Jaccard "
                "distance of consecutive iterations' active features beside the paper's top-k overlap.",
                requires=("dictionary", "iterations"), compute=feature_basin_shifts,
                tidy=lambda result: result.frame, columns=SHIFT_DOC, notes=_shift_notes, family=sections.FEATURES,
                inputs=("run", "dictionary"),
                caption="Basin shifts as feature-set change: per pair of consecutive iterations, the states, the mean "
                "Jaccard distance of their active feature sets, the mean top-k overlap of the same states (the "
                "paper's measure) and the Spearman correlation of the two over the states."),
    Measurement(name="feature_trajectories", label="", title="Each state's top features followed through the loop: "
                "the activation at every iteration.", requires=("dictionary", "iterations"),
                compute=feature_trajectories, tidy=lambda result: result.table(), columns=TRAJECTORY_DOC,
                kind="figure", figure="feature_trajectories", family=sections.FEATURES,
                inputs=("run", "dictionary"),
                caption="Features through the loop (shared dictionary): left, the features most often among a "
                "state's top 5, their mean activation at each iteration; right, each state's Jaccard distance "
                "between consecutive iterations' feature sets against the paper's top-k overlap of the same states."),
)
