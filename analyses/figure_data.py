"""The data behind the paper's run-level figures, as frames a notebook can plot (no matplotlib here).

Each function takes a :class:`~sst_interp.analyses.api.RunAnalysis` and returns :class:`FigureData` (named
long-form frames plus the numbers a figure annotates) or a NotApplicable saying why the run cannot support it.
The registry (:mod:`sst_interp.analyses.registry`) declares them; the report draws them
(:mod:`sst_interp.reporting.fig_basins`, ``fig_evaluation``, ``fig_monitoring``) and ``a.data("fig:...")`` returns
the main frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.kernels.results import AnalysisResult, NotApplicable


@dataclass(frozen=True)
class FigureData(AnalysisResult):
    """A figure's data.

    Args:
        tables: name -> long-form DataFrame (one row per plotted value).
        meta: JSON-able numbers and texts the figure annotates (thresholds, panel titles, notes).
        main: the name of the frame :meth:`table` returns (the one ``a.data`` gives).
    """

    tables: dict[str, pd.DataFrame]
    meta: dict[str, Any] = field(default_factory=dict)
    main: str = ""

    def table(self) -> pd.DataFrame:
        """The main frame."""
        return self.tables[self.main or next(iter(self.tables))]


def _pe_part(analysis: Any, attr: str) -> Any:
    pe = analysis.punctuated
    return pe if isinstance(pe, NotApplicable) else getattr(pe, attr)


def _comparison(analysis: Any) -> str:
    pe = analysis.punctuated
    return str(getattr(pe.overlap, "comparison", "")) if not isinstance(pe, NotApplicable) else ""


def sankey(analysis: Any) -> FigureData | NotApplicable:
    """fig:overthinking_sankey: pass/fail columns and the four flows of each transition."""
    from sst_interp.analyses import evaluation

    result = evaluation.overthinking_sankey(analysis.run)
    if isinstance(result, NotApplicable):
        return result
    return FigureData({"flows": result.table(), "columns": result.columns_table()}, {"n": result.n}, "flows")


#: A heatmap's data: one row per (layer, position) of one question, compared at one depth.
CELL_COLUMNS = ("question_id", "depth", "turn", "position", "layer", "overlap")


def heatmap_cells(cells: pd.DataFrame, question_id: str, depth: int, turn: int) -> pd.DataFrame:
    """A heatmap's ``layer, position, overlap`` rows with the question, depth and turn they show, in
    :data:`CELL_COLUMNS` order."""
    return cells.assign(question_id=str(question_id), depth=int(depth), turn=int(turn))[list(CELL_COLUMNS)]


def heatmap(analysis: Any, zoom: bool = False) -> FigureData | NotApplicable:
    """fig:overlap_heatmap (a representative question, sketches included) or its zoom (the full window)."""
    hm = _pe_part(analysis, "heatmap_zoom" if zoom else "heatmap")
    if isinstance(hm, NotApplicable):
        return hm
    full = int(analysis.run.manifest.get("full_positions") or 0)
    # the representative question, compared at the largest depth (the pe step's overlap), its first turn
    cells = heatmap_cells(hm.table(), hm.question_id, max(analysis.run.depths), 0)
    return FigureData({"cells": cells}, {
        "question_id": hm.question_id, "threshold": float(hm.threshold),
        "low_positions": [int(p) for p in hm.low_positions], "comparison": _comparison(analysis),
        "full_positions": full, "zoom": zoom}, "cells")


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


def layer_profile(analysis: Any) -> FigureData | NotApplicable:
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
                               "comparison": _comparison(analysis)}, _first_traces(tables))


def per_position(analysis: Any) -> FigureData | NotApplicable:
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
                               "comparison": _comparison(analysis)}, _first_traces(tables))


def long_range(analysis: Any) -> FigureData | NotApplicable:
    """fig:layer_profile_512pos: the profile over every low-overlap position, full window and sketch positions."""
    prof = _pe_part(analysis, "long_range_profile")
    if isinstance(prof, NotApplicable):
        return prof
    manifest = analysis.run.manifest
    n_pos = int(manifest.get("full_positions") or 0) + int(manifest.get("sketch_positions") or 0)
    positions = sorted({int(k[1]) for k in prof.keys})
    return FigureData(profile_frames(prof, "long"), {
        "panels": [{"key": "long", "title": f"low-overlap positions over {n_pos} generated positions", "n": prof.n}],
        "threshold": analysis.threshold[0], "comparison": _comparison(analysis),
        "notes": [f"{len(positions)} distinct positions hold low-overlap traces (up to position "
                  f"{max(positions) if positions else 0})"]}, "traces_long")


def convergence(analysis: Any) -> FigureData | NotApplicable:
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


def _first_traces(tables: dict[str, pd.DataFrame]) -> str:
    return next(name for name in tables if name.startswith("traces_"))
