"""Figures by question: ``a.data(label, question=..., depth=...)`` (issue 31).

The overlap heatmaps (fig:overlap_heatmap, fig:overlap_heatmap_zoom) show one question; the report picks a
representative one. Here a notebook picks it, and the depth it is compared at: the question's overlap between the
smallest depth's last iteration and ``depth``'s last iteration (the report's comparison when ``depth`` is the
largest), at every layer and recorded position (sketches included for the full heatmap, the full-state window for
the zoom), low-overlap positions marked at the run's threshold.

Every other figure whose data carry a ``question_id`` column (the layer profiles' traces, the convergence traces,
fig:halt_signal) is selected from its frame: the rows of that question (and of that depth, where the frame has one).

The two heatmaps' entries are declared here (:data:`MEASUREMENTS`), with the report's representative question
(:func:`heatmap_figure`) beside the notebook's choice of one (:func:`question_heatmap`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from sst_interp.analyses.basin_profiles import comparison_of, overlap_heatmap
from sst_interp.analyses import sections
from sst_interp.analyses.measurement import Measurement, figure_main, pe_part
from sst_interp.analyses.overlap import cross_run_overlap
from sst_interp.analyses.figure_data import FigureData
from sst_interp.kernels.results import NotApplicable

#: A heatmap's data: one row per (layer, position) of one question, compared at one depth.
CELL_COLUMNS = ("question_id", "depth", "turn", "position", "layer", "overlap")


def heatmap_cells(cells: pd.DataFrame, question_id: str, depth: int, turn: int) -> pd.DataFrame:
    """A heatmap's ``layer, position, overlap`` rows with the question, depth and turn they show, in
    :data:`CELL_COLUMNS` order."""
    return cells.assign(question_id=str(question_id), depth=int(depth), turn=int(turn))[list(CELL_COLUMNS)]


def question_heatmap(analysis: Any, question: str, depth: int | None = None, turn: int = 0,
                     zoom: bool = False) -> FigureData | NotApplicable:
    """fig:overlap_heatmap (``zoom=False``: full window and sketches) or fig:overlap_heatmap_zoom (the full-state
    window) of ``question`` compared at ``depth`` (default: the largest).

    Returns:
        FigureData with ``cells`` (:data:`CELL_COLUMNS`, one row per layer and
        position) and the meta the report's heatmap draws (threshold, low-overlap positions, comparison), or a
        NotApplicable saying why.
    """
    label = "fig:overlap_heatmap_zoom" if zoom else "fig:overlap_heatmap"
    run = analysis.run
    depths = sorted(run.depths)
    depth = depths[-1] if depth is None else int(depth)
    if depth not in depths:
        return NotApplicable(f"depth {depth} is not in the run (depths {depths})", label)
    if depth == depths[0]:
        return NotApplicable(f"depth {depth} is the smallest: the heatmap compares it with a deeper depth "
                             f"({', '.join(map(str, depths[1:]))})", label)
    if str(question) not in run.question_ids(depths[0]) or str(question) not in run.question_ids(depth):
        return NotApplicable(f"question {question!r} is not recorded at depths {depths[0]} and {depth}", label)
    sketches = int(run.manifest.get("sketch_positions") or 0) > 0 and not zoom
    k = int(run.manifest.get("sketch_k") or 0) if sketches else None
    overlap = cross_run_overlap(run, depths[0], depth, k=k, source="both" if sketches else "hidden",
                                question_ids=[str(question)], turn=int(turn))
    if isinstance(overlap, NotApplicable):
        return overlap
    threshold = analysis.threshold[0]
    hm = overlap_heatmap(overlap, threshold, question_id=str(question), zoom=zoom)
    if isinstance(hm, NotApplicable):
        return hm
    full = int(run.manifest.get("full_positions") or 0)
    return FigureData({"cells": heatmap_cells(hm.table(), hm.question_id, depth, turn)}, {
        "question_id": hm.question_id, "depth": depth, "turn": int(turn), "threshold": float(threshold),
        "low_positions": [int(p) for p in hm.low_positions], "comparison": overlap.comparison,
        "full_positions": full, "zoom": zoom}, "cells")


def selected(frame: pd.DataFrame, label: str, question: str | None, depth: int | None,
             turn: int | None) -> pd.DataFrame | str:
    """The rows of ``frame`` for ``question`` (and ``depth``, ``turn``), or why they cannot be selected (a frame
    without that column, no such rows)."""
    asked = {"question_id": None if question is None else str(question), "depth": depth, "turn": turn}
    keep = pd.Series(True, index=frame.index)
    for column, value in asked.items():
        if value is None:
            continue
        if column not in frame.columns:
            return (f"{label} is not drawn per question (its data have no question_id column)"
                    if column == "question_id" else f"{label}'s data have no {column} column; leave {column}= out")
        keep &= (frame[column].astype(str) == value) if column == "question_id" else (frame[column] == int(value))
    if not keep.any():
        what = ", ".join(f"{column} {value!r}" for column, value in asked.items() if value is not None)
        return f"{label} has no rows for {what}"
    return frame[keep].reset_index(drop=True)


# ------------------------------------------------------------------------------------------------ the
# report's heatmaps (its representative questions) and their entries
def heatmap_figure(analysis: Any, zoom: bool = False) -> FigureData | NotApplicable:
    """fig:overlap_heatmap (a representative question, sketches included) or its zoom (the full window)."""
    hm = pe_part("heatmap_zoom" if zoom else "heatmap")(analysis)
    if isinstance(hm, NotApplicable):
        return hm
    full = int(analysis.run.manifest.get("full_positions") or 0)
    # the representative question, compared at the largest depth (the pe step's overlap), its first turn
    cells = heatmap_cells(hm.table(), hm.question_id, max(analysis.run.depths), 0)
    return FigureData({"cells": cells}, {
        "question_id": hm.question_id, "threshold": float(hm.threshold),
        "low_positions": [int(p) for p in hm.low_positions], "comparison": comparison_of(analysis),
        "full_positions": full, "zoom": zoom}, "cells")


def _question_heatmap(zoom: bool) -> Callable[..., Any]:
    def compute(a: Any, question: str, depth: int | None, turn: int | None) -> Any:
        return question_heatmap(a, question, depth, turn or 0, zoom=zoom)

    return compute


HEATMAP_DOC = {"question_id": "the question shown", "depth": "the depth compared with the smallest (each one's last "
               "iteration)", "turn": "model turn", "position": "generated position", "layer": "decoder layer",
               "overlap": "top-k overlap"}

MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(name="overlap_heatmap", label="fig:overlap_heatmap", title="Top-k overlap across layers and positions "
                "for a representative question.", requires=("iterations",), compute=heatmap_figure, tidy=figure_main,
                columns=HEATMAP_DOC, kind="figure", per_question=_question_heatmap(False), family=sections.BASIN_SHIFTS,
                figure="overlap_heatmap", caption="Top-k overlap between the shallowest and deepest runs across layers "
                "and generated positions for a representative question (sketch positions included); dark streaks are "
                "basin shifts."),
    Measurement(name="overlap_heatmap_zoom", label="fig:overlap_heatmap_zoom", title="The overlap of a second question "
                "over the full-state window.", requires=("iterations",), compute=lambda a: heatmap_figure(a, zoom=True),
                tidy=figure_main, columns=HEATMAP_DOC, kind="figure", per_question=_question_heatmap(True),
                family=sections.BASIN_SHIFTS, figure="overlap_heatmap", caption="The same overlap for a second "
                "question over the full-state window only (the question with the most low-overlap positions)."),
)
