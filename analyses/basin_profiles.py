"""Layer profiles and heatmap data of top-k overlap at basin shifts (fig:layer_profile, fig:layer_profile_per_position,
fig:layer_profile_512pos, fig:overlap_heatmap, fig:overlap_heatmap_zoom), and the run-level bundle
:func:`punctuated_equilibrium`.

A layer profile is, per layer, the distribution over a set of (question, position) traces of the overlap: median,
IQR (p25-p75), p10-p90 and p5-p95 (numpy percentiles, linear interpolation), plus the traces themselves (the
paper draws individual traces when N < 5). Aggregate profiles restrict to pre-divergence positions (the paper's
356 pre-divergent low-overlap positions); position 0 is always pre-divergence.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from sst_interp.analyses import sections, tidy
from sst_interp.analyses.basins import (
    BasinSummary,
    GMMFit,
    GMMRobustness,
    Position0Shift,
    Rule,
    basin_summary,
    classify_positions,
    fit_gmm,
    gmm_robustness,
    position0_universality,
)
from sst_interp.analyses.divergence import (
    CausalOrdering,
    DivergenceResult,
    Pos0Divergence,
    causal_ordering,
    divergence,
    first_true,
    pos0_divergence,
)
from sst_interp.analyses.figure_data import FigureData
from sst_interp.analyses.measurement import Measurement, pe_part
from sst_interp.analyses.overlap import (
    OverlapResult,
    _collect_many,
    _cross_plan,
    _Failed,
    _unwrap,
    _within_plan,
)
from sst_interp.kernels.paper import PAPER_THRESHOLD
from sst_interp.kernels.results import AnalysisResult, NotApplicable, single_depth

if TYPE_CHECKING:
    from sst_interp.store import Run

PERCENTILES = (5, 10, 25, 50, 75, 90, 95)
MIN_BAND_N = 5


@dataclass(frozen=True)
class LayerProfile(AnalysisResult):
    """Per-layer overlap distribution over a set of (question, position) traces.

    Args:
        name: which profile ("position 0", "positions 7-9", "position 3", "low-overlap", ...).
        layers: [L].
        traces: [N, L] overlaps of the selected (question, position) pairs.
        keys: [N] (question_id, position) of each trace.
    """

    name: str
    layers: np.ndarray
    traces: np.ndarray
    keys: tuple[tuple[str, int], ...]
    label = "fig:layer_profile"

    @property
    def n(self) -> int:
        """Number of traces."""
        return int(self.traces.shape[0])

    @property
    def banded(self) -> bool:
        """True when N >= 5 (draw bands); else draw the individual traces."""
        return self.n >= MIN_BAND_N

    def table(self) -> pd.DataFrame:
        """layer, n, mean, p5, p10, p25 (IQR low), median, p75 (IQR high), p90, p95."""
        with warnings.catch_warnings():
            # a layer with no trace (a latent-iteration family's layer outside its loop) is n = 0 with NaN statistics
            warnings.filterwarnings("ignore", "All-NaN slice|Mean of empty slice", RuntimeWarning)
            pct = np.nanpercentile(self.traces, PERCENTILES, axis=0)  # [7, L]
            mean = np.nanmean(self.traces, axis=0)
        frame = pd.DataFrame({"layer": self.layers, "n": (~np.isnan(self.traces)).sum(axis=0), "mean": mean})
        for q, row in zip(PERCENTILES, pct):
            frame["median" if q == 50 else f"p{q}"] = row
        return frame[["layer", "n", "mean", "p5", "p10", "p25", "median", "p75", "p90", "p95"]]


def layer_profile(overlap: OverlapResult, mask: np.ndarray, name: str) -> LayerProfile | NotApplicable:
    """Profile of the (question, position) pairs where ``mask: [Q, P]`` is True, from ``overlap.values``."""
    mask = np.asarray(mask, dtype=bool) & overlap.valid
    if not mask.any():
        return NotApplicable(f"no (question, position) pairs for the {name} layer profile", "fig:layer_profile")
    qi, pi = np.nonzero(mask)
    keys = tuple((overlap.question_ids[q], int(overlap.positions[p])) for q, p in zip(qi, pi))
    return LayerProfile(name, overlap.layers, overlap.values[qi, pi], keys)


def layer_profiles(overlap: OverlapResult, low: np.ndarray, pre_divergence: np.ndarray | None = None,
                   late: Sequence[int] | None = None) -> dict[str, LayerProfile | NotApplicable]:
    """The paper's profiles from ``overlap`` (window positions), ``low: [Q, P]`` flags and an optional
    ``pre_divergence: [Q, P]`` mask.

    Keys: "position 0" (every question low at 0), "late" (low at ``late`` positions, default the last three of
    the grid, the paper's 7-9), "low-overlap" (all low positions), "stable" (all other positions), and
    "position p" for each position (fig:layer_profile_per_position). All but position 0 are pre-divergence.
    """
    pos = overlap.positions
    pre = np.ones_like(low, dtype=bool) if pre_divergence is None else np.asarray(pre_divergence, dtype=bool)
    late = list(pos[-3:]) if late is None else list(late)
    out: dict[str, LayerProfile | NotApplicable] = {
        "position 0": layer_profile(overlap, low & (pos == 0)[None, :], "position 0"),
        "late": layer_profile(overlap, low & pre & np.isin(pos, late)[None, :],
                              f"positions {late[0]}-{late[-1]}" if late else "late"),
        "low-overlap": layer_profile(overlap, low & pre, "low-overlap"),
        "stable": layer_profile(overlap, ~low & pre, "stable"),
    }
    for j, p in enumerate(pos.tolist()):
        column = np.zeros_like(low)
        column[:, j] = True
        mask = low & column & (pre if p != 0 else True)
        out[f"position {p}"] = layer_profile(overlap, mask, f"position {p}")
    return out


@dataclass(frozen=True)
class HeatmapData(AnalysisResult):
    """Overlap of one question across layers and positions (fig:overlap_heatmap and its zoom).

    Args:
        question_id: the question shown.
        positions: [P].
        layers: [L].
        values: [L, P] overlaps (rows = layers, as drawn).
        threshold: GMM crossover marked on the colour bar.
        low_positions: the question's low-overlap positions.
    """

    question_id: str
    positions: np.ndarray
    layers: np.ndarray
    values: np.ndarray
    threshold: float
    low_positions: tuple[int, ...]
    figure: str = "fig:overlap_heatmap"
    label = "fig:overlap_heatmap"

    def table(self) -> pd.DataFrame:
        """Long form: layer, position, overlap."""
        layer, position = np.meshgrid(self.layers, self.positions, indexing="ij")
        keep = ~np.isnan(self.values)
        return pd.DataFrame({"layer": layer[keep], "position": position[keep], "overlap": self.values[keep]})


def overlap_heatmap(overlap: OverlapResult, threshold: float, question_id: str | None = None,
                    exclude: Sequence[str] = (), rule: Rule = "any", zoom: bool = False) -> HeatmapData | NotApplicable:
    """Heatmap data of one question. Default question: the one whose number of low-overlap positions is closest to
    the median over questions (a representative one); with ``zoom=True`` (fig:overlap_heatmap_zoom, "a separate
    question chosen to display the cascade") the one with the most low-overlap positions, skipping ``exclude``.
    """
    label = "fig:overlap_heatmap_zoom" if zoom else "fig:overlap_heatmap"
    low = classify_positions(overlap.values, threshold, rule)
    ids = list(overlap.question_ids)
    candidates = [i for i, q in enumerate(ids) if q not in set(exclude)]
    if question_id is not None:
        if question_id not in ids:
            return NotApplicable(f"question {question_id!r} is not in the overlap data", label)
        row = ids.index(question_id)
    elif not candidates:
        return NotApplicable("no question left to show", label)
    else:
        counts = low.sum(axis=1)
        if zoom:
            row = max(candidates, key=lambda i: (counts[i], -i))
        else:
            median = float(np.median(counts[candidates]))
            row = min(candidates, key=lambda i: (abs(counts[i] - median), i))
    keep = overlap.valid[row]
    return HeatmapData(ids[row], overlap.positions[keep], overlap.layers, overlap.values[row][keep].T,
                       float(threshold), tuple(overlap.positions[low[row]].tolist()), label)


# ---------------------------------------------------------------------------------------------- run level
@dataclass(frozen=True)
class PunctuatedEquilibrium(AnalysisResult):
    """Every sec:punctuated_equilibrium measurement of one run (each part may be NotApplicable).

    Args:
        overlap: cross-run overlap, smallest vs largest depth, full window.
        gmm: the 2-component fit; robustness: 2-5 components.
        summary: low-overlap positions, rates, gaps.
        divergence: first divergences; causal: tab:causal_ordering; pos0_divergence: tab:pos0_divergence.
        pos0: position-0 iteration 1 vs 2 universality.
        profiles: layer profiles (window); long_range: overlap over the sketch positions and its profile/heatmap.
    """

    overlap: OverlapResult | NotApplicable
    gmm: GMMFit | NotApplicable
    robustness: GMMRobustness | NotApplicable
    summary: BasinSummary | NotApplicable
    divergence: DivergenceResult | NotApplicable
    causal: CausalOrdering | NotApplicable
    pos0_divergence: Pos0Divergence | NotApplicable
    pos0: Position0Shift | NotApplicable
    profiles: dict[str, LayerProfile | NotApplicable]
    heatmap: HeatmapData | NotApplicable
    heatmap_zoom: HeatmapData | NotApplicable
    long_range_profile: LayerProfile | NotApplicable
    label = "sec:punctuated_equilibrium"

    def table(self) -> pd.DataFrame:
        """The GMM table (the headline of the section)."""
        return self.gmm.table()


def _deferred(plan: Any, *args: Any, **kwargs: Any) -> Any:
    """``plan(*args, **kwargs)``, or a _Failed holding its error, raised only if that overlap is used."""
    try:
        return plan(*args, **kwargs)
    except Exception as err:  # noqa: BLE001 - raised again where the overlap is used, as before the shared pass
        return _Failed(err)


def punctuated_equilibrium(run: Run, k: int | None = None, rule: Rule = "any", components: Sequence[int] = (2, 3, 4, 5),
                           long_range: bool = True) -> PunctuatedEquilibrium | NotApplicable:
    """Run every measurement of sec:punctuated_equilibrium on ``run`` (streaming, one question at a time, each
    question's shards read once for all three overlaps)."""
    refused = single_depth(run.depths, "sec:punctuated_equilibrium", "basin shifts need two or more")
    if refused is not None:
        return refused
    # the three overlaps of the section in one pass over the questions, so each question's hidden shards are read
    # once: basin shifts (smallest vs largest depth), position 0 (iteration 1 vs 2) and, with sketches, long range
    second = run.depths[1]
    main = _cross_plan(run, k=k, source="hidden")
    if isinstance(main, NotApplicable):
        return main
    plans = [main,
             _deferred(_cross_plan, run, run.depths[0], second, k=k, positions=[0]) if run.depths[0] == 1 and
             second == 2 else _deferred(_within_plan, run, run.depths[-1], 1, 2, k=k, positions=[0])]
    sketch_k = int(run.manifest.get("sketch_k") or 0)
    wants_long = long_range and int(run.manifest.get("sketch_positions") or 0) > 0 and (k is None or k == sketch_k)
    if wants_long:
        plans.append(_deferred(_cross_plan, run, k=sketch_k, source="both"))
    collected = _collect_many(run, plans)
    overlap = _unwrap(collected[0])
    if isinstance(overlap, NotApplicable):
        return overlap
    na = NotApplicable
    gmm = fit_gmm(overlap.values)
    robust = gmm_robustness(overlap.values, components, fitted=[gmm] if isinstance(gmm, GMMFit) else [])
    div = divergence(run)
    if isinstance(gmm, NotApplicable):
        reason = na(gmm.reason, "sec:punctuated_equilibrium")
        return PunctuatedEquilibrium(overlap, gmm, robust, reason, div, reason, reason, reason, {}, reason, reason,
                                     reason)
    t = gmm.threshold
    summary = basin_summary(overlap, t, rule)
    low = classify_positions(overlap.values, t, rule)
    window = overlap.positions
    if isinstance(div, DivergenceResult):
        order = [div.question_ids.index(q) for q in overlap.question_ids if q in div.question_ids]
        first_div = div.first_any[order] if len(order) == len(overlap.question_ids) else None
    else:
        first_div = None
    if first_div is not None:
        pre = window[None, :] <= np.where(first_div < 0, np.iinfo(np.int64).max, first_div)[:, None]
        causal = causal_ordering(first_true(low, window), first_div, div.window, overlap.question_ids)
        low0 = low[:, 0] if window.size and window[0] == 0 else np.zeros(len(low), bool)
        p0div = pos0_divergence(low0, first_div, div.window)
    else:
        pre = None
        reason = div.reason if isinstance(div, NotApplicable) else "divergence covers other questions"
        causal = na(reason, "tab:causal_ordering")
        p0div = na(reason, "tab:pos0_divergence")
    pos0_ov = _unwrap(collected[1])
    pos0 = position0_universality(pos0_ov, t, rule) if isinstance(pos0_ov, OverlapResult) else pos0_ov
    profiles = layer_profiles(overlap, low, pre)
    heat: HeatmapData | NotApplicable = na("the run has no sketch positions", "fig:overlap_heatmap")
    long_profile: LayerProfile | NotApplicable = na("the run has no sketch positions", "fig:layer_profile_512pos")
    if long_range and int(run.manifest.get("sketch_positions") or 0) > 0:
        if wants_long:
            long_ov = _unwrap(collected[2])
            if isinstance(long_ov, OverlapResult):
                heat = overlap_heatmap(long_ov, t, rule=rule)
                long_low = classify_positions(long_ov.values, t, rule)
                long_profile = layer_profile(long_ov, long_low, "long range")
        else:
            heat = na(f"sketches hold top-{sketch_k} sets, not top-{k}", "fig:overlap_heatmap")
    if isinstance(heat, NotApplicable):
        heat = overlap_heatmap(overlap, t, rule=rule)
    zoom_exclude = (heat.question_id,) if isinstance(heat, HeatmapData) else ()
    zoom = overlap_heatmap(overlap, t, exclude=zoom_exclude, rule=rule, zoom=True)
    return PunctuatedEquilibrium(overlap, gmm, robust, summary, div, causal, p0div, pos0, profiles, heat, zoom,
                                 long_profile)


def low_overlap_threshold(punctuated: PunctuatedEquilibrium | NotApplicable) -> tuple[float, str]:
    """(low-overlap threshold, where it came from) for a run's :func:`punctuated_equilibrium`: its GMM crossover
    (app:gmm), else the paper's (:data:`~sst_interp.kernels.paper.PAPER_THRESHOLD`) when the run has no fit."""
    gmm = getattr(punctuated, "gmm", None)
    if isinstance(gmm, GMMFit):
        return float(gmm.threshold), "this run's GMM crossover"
    return float(PAPER_THRESHOLD), "the paper's GMM crossover (this run has no fit)"


# ------------------------------------------------------------------------------------------------ figure data
# The layer profile figures: fig:layer_profile, its per-position and long-range forms.

def comparison_of(analysis: Any) -> str:
    """What the run's basin step compared (``iter-1 vs iter-N``, ...), or "" when it has none."""
    pe = analysis.punctuated
    return str(getattr(pe.overlap, "comparison", "")) if not isinstance(pe, NotApplicable) else ""


def profile_frames(profile: Any, key: str) -> dict[str, pd.DataFrame]:
    """``stats_<key>`` (the LayerProfile table) and ``traces_<key>`` (long form: trace, question_id, position,
    layer, overlap) of one profile."""
    traces = np.asarray(profile.traces, dtype=np.float64)  # [N, L]
    n, n_layers = traces.shape
    qids = [k[0] for k in profile.keys]
    positions = [int(k[1]) for k in profile.keys]
    long = pd.DataFrame({
        "trace": np.repeat(np.arange(n), n_layers),
        "question_id": np.repeat(np.array(qids, dtype=object), n_layers),
        "position": np.repeat(np.array(positions, dtype=np.int64), n_layers),
        "layer": np.tile(np.asarray(profile.layers, dtype=np.int64), n),
        "overlap": traces.reshape(-1),
    })
    return {f"stats_{key}": profile.table(), f"traces_{key}": long.dropna(subset=["overlap"])}


def layer_profile_figure(analysis: Any) -> FigureData | NotApplicable:
    """fig:layer_profile: (a) position 0, (b) the late window positions (pre-divergence)."""
    pe = analysis.punctuated
    if isinstance(pe, NotApplicable):
        return pe
    tables: dict[str, pd.DataFrame] = {}
    panels, notes = [], []
    for key, letter in (("position 0", "(a)"), ("late", "(b)")):
        prof = pe.profiles.get(key)
        if prof is None or isinstance(prof, NotApplicable):
            reason = getattr(prof, "reason", "not computed")
            notes.append(f"{letter} {key}: {reason}")
            what = "late positions" if key == "late" else key
            panels.append({"key": None, "title": f"{letter} {what}", "n": 0,
                           "message": f"no pre-divergence low-overlap traces ({reason})"})
            continue
        tag = key.replace(" ", "")
        tables.update(profile_frames(prof, tag))
        panels.append({"key": tag, "title": f"{letter} {prof.name}", "n": prof.n})
    if all(p["key"] is None for p in panels):
        return NotApplicable("; ".join(notes), "fig:layer_profile")
    return FigureData(tables, {"panels": panels, "threshold": analysis.threshold[0], "notes": notes,
                               "comparison": comparison_of(analysis)}, _first_traces(tables))


def per_position_figure(analysis: Any) -> FigureData | NotApplicable:
    """fig:layer_profile_per_position: one profile per window position with low-overlap traces."""
    pe = analysis.punctuated
    if isinstance(pe, NotApplicable):
        return pe
    tables: dict[str, pd.DataFrame] = {}
    panels, empty = [], []
    keys = sorted((k for k in pe.profiles if k.startswith("position ")), key=lambda k: int(k.split()[1]))
    for key in keys:
        prof = pe.profiles[key]
        if isinstance(prof, NotApplicable):
            empty.append(int(key.split()[1]))
            continue
        tag = f"p{int(key.split()[1])}"
        tables.update(profile_frames(prof, tag))
        panels.append({"key": tag, "title": f"position {key.split()[1]}", "n": prof.n})
    if not panels:
        return NotApplicable("no window position has low-overlap traces", "fig:layer_profile_per_position")
    notes = [f"positions without low-overlap traces (not drawn): {', '.join(map(str, empty))}"] if empty else []
    return FigureData(tables, {"panels": panels, "threshold": analysis.threshold[0], "notes": notes,
                               "comparison": comparison_of(analysis)}, _first_traces(tables))


def long_range_figure(analysis: Any) -> FigureData | NotApplicable:
    """fig:layer_profile_512pos: the profile over every low-overlap position, full window and sketch positions."""
    prof = pe_part("long_range_profile")(analysis)
    if isinstance(prof, NotApplicable):
        return prof
    manifest = analysis.run.manifest
    n_pos = int(manifest.get("full_positions") or 0) + int(manifest.get("sketch_positions") or 0)
    positions = sorted({int(k[1]) for k in prof.keys})
    return FigureData(profile_frames(prof, "long"), {
        "panels": [{"key": "long", "title": f"low-overlap positions over {n_pos} generated positions", "n": prof.n}],
        "threshold": analysis.threshold[0], "comparison": comparison_of(analysis),
        "notes": [f"{len(positions)} distinct positions hold low-overlap traces (up to position "
                  f"{max(positions) if positions else 0})"]}, "traces_long")


def _first_traces(tables: dict[str, pd.DataFrame]) -> str:
    return next(name for name in tables if name.startswith("traces_"))


# ------------------------------------------------------------------------------------------------ entries
def _profile_traces(result: Any) -> pd.DataFrame:
    """Every panel's traces in one frame, the panel named in ``panel``."""
    frames = [frame.assign(panel=name.removeprefix("traces_")) for name, frame in result.tables.items()
              if name.startswith("traces_")]
    long = pd.concat(frames, ignore_index=True)
    return tidy.renamed(long[["panel", "trace", "question_id", "position", "layer", "overlap"]], {})


PROFILE_DOC = {"panel": "position0, late, p<k> or long", "trace": "trace index within the panel",
               "question_id": "question", "position": "generated position", "layer": "decoder layer",
               "overlap": "top-k overlap"}

MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(name="layer_profile", label="fig:layer_profile", title="Layer profile of top-k overlap at low-overlap "
                "positions: position 0 and late positions.", requires=("iterations",), compute=layer_profile_figure,
                tidy=_profile_traces, columns=PROFILE_DOC, kind="figure", family=sections.BASIN_SHIFTS,
                figure="layer_profiles", caption="Layer profile of top-k overlap at low-overlap positions: (a) "
                "position 0, (b) the last window positions (pre-divergence); median with IQR, p10-p90 and p5-p95 "
                "bands."),
    Measurement(name="layer_profile_per_position", label="fig:layer_profile_per_position", title="Layer profile at "
                "low-overlap positions, per window position.", requires=("iterations",), compute=per_position_figure,
                tidy=_profile_traces, columns=PROFILE_DOC, kind="figure", family=sections.BASIN_SHIFTS,
                figure="layer_profiles", caption="Layer profile at low-overlap positions, one panel per window "
                "position (bands for N >= 5, individual traces below)."),
    Measurement(name="layer_profile_512pos", label="fig:layer_profile_512pos", title="Layer profile over every "
                "low-overlap position of the long range.", requires=("iterations",), compute=long_range_figure,
                tidy=_profile_traces, columns=PROFILE_DOC, kind="figure", family=sections.BASIN_SHIFTS,
                figure="layer_profiles", caption="Layer profile over every low-overlap position of the long range "
                "(full window plus top-k sketches)."),
)
