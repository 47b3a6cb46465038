"""Logit-dynamics tables (app:logit_tables) from :class:`LogitRecords`.

Every table is wide: one row per quantity, one column per group (e.g. ``low_overlap`` / ``stable``,
or ``within`` / ``cross``). A statistic that spans both columns in the paper (a test between the
groups) carries the same value in both. Proportions print Clopper-Pearson 95% intervals; means a
seeded percentile bootstrap interval. A table whose groups are empty is :class:`NotApplicable`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from sst_interp.kernels import stats
from sst_interp.kernels.results import AnalysisResult, NotApplicable
from sst_interp.analyses.logit_dynamics.records import N_TOP5, LogitRecords
from sst_interp.kernels.errors import UsageError

LOW, STABLE = "low_overlap", "stable"
GAP_SMALL, GAP_NAT = 0.25, 1.0


@dataclass(frozen=True)
class LogitTable(AnalysisResult):
    """A wide logit-dynamics table.

    Args:
        frame: columns ``quantity`` and one per group.
        counts: records per group (the paper's N).
    """

    label: ClassVar[str] = ""
    frame: pd.DataFrame
    counts: dict[str, int]

    def table(self) -> pd.DataFrame:
        """The wide table (``quantity`` plus one column per group)."""
        return self.frame

    def value(self, quantity: str, group: str) -> float:
        """One cell, by quantity name and group column."""
        hit = self.frame.loc[self.frame["quantity"] == quantity, group]
        if hit.empty:
            raise KeyError(quantity)
        return float(hit.iloc[0])


def _wide(rows: list[tuple[str, dict[str, float]]], groups: list[str]) -> pd.DataFrame:
    return pd.DataFrame([{"quantity": q, **{g: float(v[g]) for g in groups}} for q, v in rows])


def _both(value: float, groups: list[str]) -> dict[str, float]:
    return {g: value for g in groups}


def _rate_rows(name: str, k: dict[str, int], n: dict[str, int]) -> list[tuple[str, dict[str, float]]]:
    cis = {g: stats.clopper_pearson_interval(k[g], n[g]) for g in n}
    return [(f"{name} (%)", {g: 100.0 * k[g] / n[g] for g in n}),
            (f"{name} CI low (%)", {g: 100.0 * cis[g].low for g in n}),
            (f"{name} CI high (%)", {g: 100.0 * cis[g].high for g in n})]


def _mean_rows(name: str, values: dict[str, np.ndarray], seed: int, n_resamples: int):
    cis = {g: stats.bootstrap_ci(v, np.mean, n_resamples=n_resamples, seed=seed) for g, v in values.items()}
    return [(f"{name} mean", {g: float(np.mean(v)) for g, v in values.items()}),
            (f"{name} mean CI low", {g: cis[g].low for g in values}),
            (f"{name} mean CI high", {g: cis[g].high for g in values})]


def _labelled(recs: LogitRecords, kind: str) -> pd.DataFrame:
    r = recs.records
    if r.empty:
        return r
    r = r[r["kind"] == kind]
    return r[r["low_overlap"].notna()]


def _by_regime(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    lo = frame["low_overlap"].astype(bool).to_numpy()
    return {LOW: frame[lo], STABLE: frame[~lo]}


def _need(parts: dict[str, pd.DataFrame], what: str, label: str) -> NotApplicable | None:
    empty = [g for g, f in parts.items() if f.empty]
    if empty:
        return NotApplicable(f"no {what} in group(s) {', '.join(empty)}", label)
    return None


def _no_labels(recs: LogitRecords, label: str) -> NotApplicable | None:
    if recs.records.empty:
        return NotApplicable("no comparison records (need a run with two or more depths or iterations)", label)
    if recs.records["low_overlap"].isna().all():
        return NotApplicable("no overlap-regime labels for the compared positions; pass a label table", label)
    return None


class ArgmaxConcentration(LogitTable):
    """tab:argmax_concentration (cross-run, all run pairs)."""

    label = "tab:argmax_concentration"


def argmax_concentration(recs: LogitRecords) -> ArgmaxConcentration | NotApplicable:
    """Argmax change rate by overlap regime over all cross-run pairs, with the odds ratio (low vs stable)."""
    label = ArgmaxConcentration.label
    if (bad := _no_labels(recs, label)) is not None:
        return bad
    parts = _by_regime(_labelled(recs, "cross"))
    if (bad := _need(parts, "cross-run records", label)) is not None:
        return bad
    groups = [LOW, STABLE, "total"]
    n = {g: len(f) for g, f in parts.items()}
    k = {g: int(f["changed"].sum()) for g, f in parts.items()}
    n["total"], k["total"] = sum(n.values()), sum(k.values())
    rows = [("records", {g: n[g] for g in groups}), ("argmax changes", {g: k[g] for g in groups})]
    rows += _rate_rows("argmax change rate", k, n)
    table = [[k[LOW], n[LOW] - k[LOW]], [k[STABLE], n[STABLE] - k[STABLE]]]
    if min(k[LOW], k[STABLE], n[LOW] - k[LOW], n[STABLE] - k[STABLE]) > 0:
        orr = stats.odds_ratio(table)
        rows += [("odds ratio (low vs stable)", _both(orr.odds_ratio, groups)),
                 ("odds ratio CI low", _both(orr.ci.low, groups)),
                 ("odds ratio CI high", _both(orr.ci.high, groups))]
    rows.append(("Fisher exact p", _both(stats.fisher_exact(table).pvalue, groups)))
    return ArgmaxConcentration(_wide(rows, groups), {g: n[g] for g in groups})


class DecisionBoundary(LogitTable):
    """tab:decision_boundary (cross-run, all run pairs)."""

    label = "tab:decision_boundary"


def decision_boundary(recs: LogitRecords) -> DecisionBoundary | NotApplicable:
    """Exact-tie rate among cross-run argmax changes and the top-1 log-prob shift at changes vs non-changes.

    One value column. The top-1 shift is |new - original| log-prob of the original argmax token; records
    whose token left the other run's top-K are excluded from the shift rows (``shift records`` counts the rest).
    """
    label = DecisionBoundary.label
    r = recs.records
    if r.empty:
        return NotApplicable("no comparison records (need a run with two or more depths)", label)
    cross = r[r["kind"] == "cross"]
    changed = cross[cross["changed"]]
    unchanged = cross[~cross["changed"]]
    if changed.empty:
        return NotApplicable("no argmax change at any pre-divergence cross-run position", label)
    ties = int((changed["gap"] == 0).sum())
    n = len(changed)
    rows: list[tuple[str, dict[str, float]]] = [("argmax changes", {"value": n}),
                                                 ("non-changes", {"value": len(unchanged)}),
                                                 ("exact ties (gap = 0)", {"value": ties}),
                                                 ("non-ties (gap > 0)", {"value": n - ties})]
    rows += _rate_rows("exact tie rate", {"value": ties}, {"value": n})
    rows += _rate_rows("non-tie rate", {"value": n - ties}, {"value": n})
    nonzero = cross.loc[cross["gap"] > 0, "gap"]
    if not nonzero.empty:
        rows.append(("smallest non-zero gap (nats)", {"value": float(nonzero.min())}))
    for name, part in (("argmax changes", changed), ("non-changes", unchanged)):
        shift = part["suppression"].abs().dropna().to_numpy()
        if shift.size:
            rows += [(f"top-1 shift records at {name}", {"value": shift.size}),
                     (f"top-1 log-prob shift median at {name} (nats)", {"value": float(np.median(shift))}),
                     (f"top-1 log-prob shift mean at {name} (nats)", {"value": float(np.mean(shift))}),
                     (f"probability multiplier at the median, {name}", {"value": float(np.exp(np.median(shift)))})]
    return DecisionBoundary(_wide(rows, ["value"]), {"argmax_changes": n, "non_changes": len(unchanged)})


class GapDistributions(LogitTable):
    """tab:gap_distributions (within-run, iteration 1 vs later iterations)."""

    label = "tab:gap_distributions"


def gap_distributions(recs: LogitRecords, n_resamples: int = 10_000, seed: int = stats.DEFAULT_SEED
                      ) -> GapDistributions | NotApplicable:
    """Iteration-1 top-1/top-2 gap at within-run argmax changes, by regime, with Mann-Whitney and Fisher."""
    label = GapDistributions.label
    if (bad := _no_labels(recs, label)) is not None:
        return bad
    within = _labelled(recs, "within")
    parts = _by_regime(within[within["changed"]])
    if (bad := _need(parts, "within-run argmax changes", label)) is not None:
        return bad
    groups = [LOW, STABLE]
    gaps = {g: f["gap"].to_numpy(float) for g, f in parts.items()}
    n = {g: v.size for g, v in gaps.items()}
    rows: list[tuple[str, dict[str, float]]] = [("argmax changes", n)]
    for name, test in (("exact ties (gap = 0)", lambda v: v == 0), ("gap < 0.25 nats", lambda v: v < GAP_SMALL),
                       ("gap < 1.0 nat", lambda v: v < GAP_NAT), ("gap > 1.0 nat", lambda v: v > GAP_NAT)):
        rows += _rate_rows(name, {g: int(test(v).sum()) for g, v in gaps.items()}, n)
    rows += _mean_rows("gap (nats)", gaps, seed, n_resamples)
    rows += [("gap std (nats)", {g: float(np.std(v, ddof=1)) if v.size > 1 else 0.0 for g, v in gaps.items()}),
             ("gap min (nats)", {g: float(v.min()) for g, v in gaps.items()}),
             ("gap max (nats)", {g: float(v.max()) for g, v in gaps.items()})]
    both = np.concatenate(list(gaps.values()))
    mw = 1.0 if np.all(both == both[0]) else stats.mann_whitney(gaps[LOW], gaps[STABLE]).pvalue
    ties = {g: int((v == 0).sum()) for g, v in gaps.items()}
    fisher = stats.fisher_exact([[ties[LOW], n[LOW] - ties[LOW]], [ties[STABLE], n[STABLE] - ties[STABLE]]])
    rows += [("gap Mann-Whitney p", _both(mw, groups)),
             ("exact-tie Fisher odds ratio (low vs stable)", _both(fisher.statistic, groups)),
             ("exact-tie Fisher p", _both(fisher.pvalue, groups))]
    return GapDistributions(_wide(rows, groups), n)


def _methods(recs: LogitRecords, regime: str, changed_only: bool) -> dict[str, pd.DataFrame]:
    """Within-run records and the cross-run 1->X records (lowest depth against each other) of one regime."""
    out = {}
    base = min(recs.depths)
    for kind in ("within", "cross"):
        f = _labelled(recs, kind)
        if kind == "cross":
            f = f[f["depth_a"] == base]
        f = f[f["low_overlap"].astype(bool) == (regime == LOW)]
        out[kind] = f[f["changed"]] if changed_only else f
    return out


def _pooled(frame: pd.DataFrame, prefix: str) -> np.ndarray:
    v = frame[[f"{prefix}_{j}" for j in range(N_TOP5)]].to_numpy(float).ravel()
    return v[~np.isnan(v)]


def _quantile_rows(name: str, values: dict[str, np.ndarray]) -> list[tuple[str, dict[str, float]]]:
    q = {g: np.percentile(v, [25, 50, 75]) for g, v in values.items()}
    return [(f"{name} p25", {g: q[g][0] for g in values}), (f"{name} median", {g: q[g][1] for g in values}),
            (f"{name} p75", {g: q[g][2] for g in values}),
            (f"{name} min", {g: float(v.min()) for g, v in values.items()}),
            (f"{name} max", {g: float(v.max()) for g, v in values.items()})]


class ReorgLowArgmax(LogitTable):
    """tab:reorg_lo_argmax: posterior reorganisation at low-overlap argmax changes (within vs cross)."""

    label = "tab:reorg_lo_argmax"


class ReorgStableArgmax(LogitTable):
    """tab:reorg_st_argmax: posterior reorganisation at stable argmax changes (within vs cross)."""

    label = "tab:reorg_st_argmax"


class ReorgLowAll(LogitTable):
    """tab:reorg_lo_all: all low-overlap records (within vs cross)."""

    label = "tab:reorg_lo_all"


class ReorgStableAll(LogitTable):
    """tab:reorg_st_all: all stable records (within vs cross)."""

    label = "tab:reorg_st_all"


def _check_regime(regime: str) -> None:
    if regime not in (LOW, STABLE):
        raise UsageError(f"regime must be {LOW!r} or {STABLE!r}, got {regime!r}")


@dataclass(frozen=True)
class _ReorgStart:
    """What both reorganisation tables open with: the regime's table class, its within/cross records, their counts,
    and the first rows (records, tokens replaced: mean with its interval, quantiles)."""

    cls: type[LogitTable]
    parts: dict[str, pd.DataFrame]
    counts: dict[str, int]
    rows: list[tuple[str, dict[str, Any]]]


def _reorg_start(recs: LogitRecords, regime: str, classes: tuple[type[LogitTable], type[LogitTable]],
                 changed_only: bool, n_resamples: int, seed: int) -> _ReorgStart | NotApplicable:
    """The shared opening of :func:`reorg_argmax` (``changed_only``: argmax changes) and :func:`reorg_all` (all
    records); ``classes`` are the (low-overlap, stable) tables. NotApplicable where labels or records are missing."""
    _check_regime(regime)
    cls = classes[0] if regime == LOW else classes[1]
    label = cls.label
    if (bad := _no_labels(recs, label)) is not None:
        return bad
    parts = _methods(recs, regime, changed_only=changed_only)
    what = f"{regime} argmax changes" if changed_only else f"{regime} records"
    if (bad := _need(parts, what, label)) is not None:
        return bad
    rep = {g: f["replaced"].to_numpy(float) for g, f in parts.items()}
    counts = {g: len(f) for g, f in parts.items()}
    rows: list[tuple[str, dict[str, Any]]] = [("records", counts)]
    rows += _mean_rows("tokens replaced", rep, seed, n_resamples) + _quantile_rows("tokens replaced", rep)
    return _ReorgStart(cls, parts, counts, rows)


def reorg_argmax(recs: LogitRecords, regime: str = LOW, n_resamples: int = 10_000, seed: int = stats.DEFAULT_SEED
                 ) -> ReorgLowArgmax | ReorgStableArgmax | NotApplicable:
    """Posterior reorganisation at argmax changes of one regime: within-run vs cross-run (1 -> X pairs).

    Footer rows: Mann-Whitney p between the two regimes (same method) for tokens replaced and for the
    argmax suppression, per method column.
    """
    start = _reorg_start(recs, regime, (ReorgLowArgmax, ReorgStableArgmax), changed_only=True,
                         n_resamples=n_resamples, seed=seed)
    if isinstance(start, NotApplicable):
        return start
    cls, parts, counts, rows = start.cls, start.parts, start.counts, start.rows
    groups = ["within", "cross"]
    ranks = {g: _pooled(f, "top5_rank_shift") for g, f in parts.items()}
    lps = {g: _pooled(f, "top5_lp_shift") for g, f in parts.items()}
    if all(v.size for v in ranks.values()):
        rows += [("top-5 rank shift median", {g: float(np.median(v)) for g, v in ranks.items()}),
                 ("top-5 rank shift p95", {g: float(np.percentile(v, 95)) for g, v in ranks.items()}),
                 ("top-5 rank shift max", {g: float(v.max()) for g, v in ranks.items()}),
                 ("top-5 log-prob shift min (nats)", {g: float(v.min()) for g, v in lps.items()}),
                 ("top-5 log-prob shift max (nats)", {g: float(v.max()) for g, v in lps.items()})]
    sup = {g: f["suppression"].dropna().to_numpy(float) for g, f in parts.items()}
    if all(v.size for v in sup.values()):
        rows += [("suppression records", {g: v.size for g, v in sup.items()})]
        rows += _mean_rows("argmax suppression (nats)", sup, seed, n_resamples)
        rows += _quantile_rows("argmax suppression (nats)", sup)
        rows.append(("every suppression negative", {g: float((v < 0).all()) for g, v in sup.items()}))
    win = {g: f["new_winner_rank"].dropna().to_numpy(float) for g, f in parts.items()}
    rows += [("new winner in original top-n", {g: int((v <= recs.top_n).sum()) for g, v in win.items()})]
    if all(v.size for v in win.values()):
        rows += [("new winner original rank min", {g: float(v.min()) for g, v in win.items()}),
                 ("new winner original rank median", {g: float(np.median(v)) for g, v in win.items()}),
                 ("new winner original rank max", {g: float(v.max()) for g, v in win.items()})]
    other = _methods(recs, STABLE if regime == LOW else LOW, changed_only=True)
    for name, col in (("tokens replaced", "replaced"), ("argmax suppression", "suppression")):
        p = {}
        for g in groups:
            x, y = parts[g][col].dropna().to_numpy(float), other[g][col].dropna().to_numpy(float)
            p[g] = stats.mann_whitney(x, y).pvalue if x.size and y.size and not np.all(
                np.concatenate([x, y]) == x[0]) else 1.0
        rows.append((f"{name} Mann-Whitney p (low vs stable)", p))
    return cls(_wide(rows, groups), counts)


def reorg_all(recs: LogitRecords, regime: str = LOW, n_resamples: int = 10_000, seed: int = stats.DEFAULT_SEED
              ) -> ReorgLowAll | ReorgStableAll | NotApplicable:
    """Token replacement and argmax change rate over all records of one regime: within-run vs cross-run."""
    start = _reorg_start(recs, regime, (ReorgLowAll, ReorgStableAll), changed_only=False,
                         n_resamples=n_resamples, seed=seed)
    if isinstance(start, NotApplicable):
        return start
    cls, parts, n, rows = start.cls, start.parts, start.counts, start.rows
    rows += _rate_rows("argmax change rate", {g: int(f["changed"].sum()) for g, f in parts.items()}, n)
    return cls(_wide(rows, ["within", "cross"]), n)
