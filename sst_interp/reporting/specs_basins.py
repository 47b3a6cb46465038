"""Basin-shift artefacts (sec:punctuated_equilibrium, app:gmm, app:mechanism): overlap heatmaps, layer profiles,
the GMM threshold and the low-overlap summaries. All read one
:func:`~sst_interp.analyses.basin_profiles.punctuated_equilibrium` per run."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from sst_interp.analyses.results import NotApplicable
from sst_interp.reporting import fig_basins
from sst_interp.reporting.artefacts import ArtefactData, ArtefactSpec
from sst_interp.reporting.context import ReportContext
from sst_interp.reporting.measured import measured_spec

FAMILY = "Basin shifts (punctuated equilibrium)"


def _part(ctx: ReportContext, target: str | None, attr: str) -> Any:
    pe = ctx.punctuated(target)
    return pe if isinstance(pe, NotApplicable) else getattr(pe, attr)


def profile_frames(profile: Any, key: str) -> dict[str, pd.DataFrame]:
    """``stats_<key>`` (the LayerProfile table) and ``traces_<key>`` (long form trace, question_id, position, layer,
    overlap) of one profile."""
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


def _comparison(ctx: ReportContext, target: str | None) -> str:
    pe = ctx.punctuated(target)
    return str(getattr(pe.overlap, "comparison", "")) if not isinstance(pe, NotApplicable) else ""


def heatmap(ctx: ReportContext, target: str | None, zoom: bool = False) -> ArtefactData | NotApplicable:
    """fig:overlap_heatmap (a representative question, sketches included) or its zoom (the full window)."""
    hm = _part(ctx, target, "heatmap_zoom" if zoom else "heatmap")
    if isinstance(hm, NotApplicable):
        return hm
    full = int(ctx.run_input(target).run.manifest.get("full_positions") or 0)
    return ArtefactData({"cells": hm.table()}, {
        "question_id": hm.question_id, "threshold": float(hm.threshold),
        "low_positions": [int(p) for p in hm.low_positions], "comparison": _comparison(ctx, target),
        "full_positions": full, "zoom": zoom})


def layer_profile(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
    """fig:layer_profile: (a) position 0, (b) the late window positions (pre-divergence)."""
    pe = ctx.punctuated(target)
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
    return ArtefactData(tables, {"panels": panels, "threshold": ctx.threshold(target)[0], "notes": notes,
                                 "comparison": _comparison(ctx, target)})


def per_position(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
    """fig:layer_profile_per_position: one profile per window position with low-overlap traces."""
    pe = ctx.punctuated(target)
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
    return ArtefactData(tables, {"panels": panels, "threshold": ctx.threshold(target)[0], "notes": notes,
                                 "comparison": _comparison(ctx, target)})


def long_range(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
    """fig:layer_profile_512pos: the profile over every low-overlap position, full window and sketch positions."""
    prof = _part(ctx, target, "long_range_profile")
    if isinstance(prof, NotApplicable):
        return prof
    run = ctx.run_input(target).run
    n_pos = int(run.manifest.get("full_positions") or 0) + int(run.manifest.get("sketch_positions") or 0)
    positions = sorted({int(k[1]) for k in prof.keys})
    return ArtefactData(profile_frames(prof, "long"), {
        "panels": [{"key": "long", "title": f"low-overlap positions over {n_pos} generated positions", "n": prof.n}],
        "threshold": ctx.threshold(target)[0], "comparison": _comparison(ctx, target),
        "notes": [f"{len(positions)} distinct positions hold low-overlap traces (up to position "
                  f"{max(positions) if positions else 0})"]})


SPECS: list[ArtefactSpec] = [
    ArtefactSpec("fig_overlap_heatmap", "figure", "fig:overlap_heatmap", FAMILY,
                 "Top-k overlap between the shallowest and deepest runs across layers and generated positions for "
                 "a representative question (sketch positions included); dark streaks are basin shifts.",
                 "run", ("run",), heatmap, fig_basins.draw_heatmap),
    ArtefactSpec("fig_overlap_heatmap_zoom", "figure", "fig:overlap_heatmap_zoom", FAMILY,
                 "The same overlap for a second question over the full-state window only (the question with the "
                 "most low-overlap positions).", "run", ("run",), lambda c, t: heatmap(c, t, zoom=True),
                 fig_basins.draw_heatmap),
    ArtefactSpec("fig_layer_profile", "figure", "fig:layer_profile", FAMILY,
                 "Layer profile of top-k overlap at low-overlap positions: (a) position 0, (b) the last window "
                 "positions (pre-divergence); median with IQR, p10-p90 and p5-p95 bands.", "run", ("run",),
                 layer_profile, fig_basins.draw_profiles),
    ArtefactSpec("fig_layer_profile_per_position", "figure", "fig:layer_profile_per_position", FAMILY,
                 "Layer profile at low-overlap positions, one panel per window position (bands for N >= 5, "
                 "individual traces below).", "run", ("run",), per_position, fig_basins.draw_profiles),
    ArtefactSpec("fig_layer_profile_512pos", "figure", "fig:layer_profile_512pos", FAMILY,
                 "Layer profile over every low-overlap position of the long range (full window plus top-k "
                 "sketches).", "run", ("run",), long_range, fig_basins.draw_profiles),
    measured_spec("gmm", FAMILY,
                  "Two-component Gaussian mixture on the iter-1 vs iter-N overlaps: stable and low-overlap "
                  "components and their crossover threshold (app:gmm)."),
    measured_spec("gmm_robustness", FAMILY, "Crossover threshold of 2- to 5-component mixtures (app:gmm robustness)."),
    measured_spec("basin_summary", FAMILY,
                  "Low-overlap positions per question, per-position rates, gaps between consecutive low-overlap "
                  "positions and their coefficient of variation (sec:punctuated_equilibrium)."),
    measured_spec("basin_position_rates", FAMILY,
                  "Fraction of questions with a low-overlap (basin-shift) position at each window position."),
    measured_spec("pos0_universality", FAMILY,
                  "Position 0, iteration 1 vs 2: mean and std over questions of the layer-mean overlap and how many "
                  "questions are low-overlap there."),
    measured_spec("tab:causal_ordering", "Logit dynamics",
                  "Order of the first low-overlap position and the first argmax divergence between depths, per "
                  "question."),
    measured_spec("tab:pos0_divergence", "Logit dynamics",
                  "Downstream outcome of the questions with a basin shift at position 0: diverge at 0, inside the "
                  "window, or beyond it."),
]
