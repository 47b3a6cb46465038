"""The organism's figure: when each hop count's answer appears (the lens) and when each hop is carried
(counterfactual patching), side by side, from ``python -m sst_interp.organism validate``'s rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sst_interp.experiments.feature_patching import feature_patching_table
from sst_interp.reporting.fig_common import BASE_FONT, new_figure, save_figure, style

#: The figure's file name (``.png`` and ``.pdf``) in the validation folder.
ORGANISM_FIGURE = "organism_hops"
#: The feature-patching figure's file name (``validate --features``).
FEATURE_PATCHING_FIGURE = "organism_feature_patching"
#: The feature-patching table's columns drawn, with their panel titles.
FEATURE_PATCHES = {"full": "whole state (the staircase)", "attributed": "attributed features",
                   "all_features": "all changed features", "random": "as many random features"}


def _heatmap(axes, table: pd.DataFrame, value: str) -> object:
    """Draw ``table``'s ``value`` as a changed hop x iteration grid, each cell printed; returns the image."""
    grid = table.pivot_table(index="changed_hop", columns="iteration", values=value)
    image = axes.imshow(grid.to_numpy(), vmin=0, vmax=1, cmap="viridis", aspect="auto")
    axes.set_xticks(range(grid.shape[1]), [str(c) for c in grid.columns])
    pairs = table.groupby("changed_hop")["pairs"].min()
    axes.set_yticks(range(grid.shape[0]), [f"{r} (n={pairs[r]})" for r in grid.index])
    for (i, j), cell in np.ndenumerate(grid.to_numpy()):
        axes.text(j, i, f"{cell:.2f}", ha="center", va="center", fontsize=BASE_FONT - 2,
                  color="black" if cell > 0.5 else "white")
    axes.grid(False)
    return image


def organism_figure(resolution: pd.DataFrame, flips: pd.DataFrame, chance: float | None = None) -> Figure:
    """Two panels.

    Args:
        resolution: :func:`~sst_interp.analyses.hops.answer_resolution` of the run (``hops``, ``questions``,
            ``iteration_1`` ..): the fraction of questions whose answer is on top at each iteration.
        flips: :func:`~sst_interp.experiments.hops_patching.flip_table` (``changed_hop``, ``iteration``,
            ``became_b``, ``pairs``).
        chance: the task's chance accuracy, drawn as a dashed line (None: not drawn).
    """
    fig = new_figure(9.0, 3.4)
    lens, patch = fig.subplots(1, 2)
    iterations = [c for c in resolution.columns if c.startswith("iteration_")]
    x = np.arange(1, len(iterations) + 1)
    colours = [f"C{i}" for i in range(len(resolution))]
    for colour, row in zip(colours, resolution.itertuples(index=False)):
        values = [getattr(row, c) for c in iterations]
        lens.plot(x, values, marker="o", color=colour, label=f"{row.hops} hops (n={row.questions})")
    if chance is not None:
        lens.axhline(chance, color="grey", linestyle="--", linewidth=1, label=f"chance ({chance:.2f})")
    lens.set_xticks(x)
    lens.set_ylim(0, 1.05)
    lens.legend(fontsize=BASE_FONT - 2, loc="lower right")
    style(lens, "answer on top of the lens, by hop count", "iteration (H-cycle)", "fraction of questions")
    image = _heatmap(patch, flips, "became_b")
    fig.colorbar(image, ax=patch, label="answer became the counterfactual's")
    style(patch, "patching iteration i from a prompt whose hop j differs", "iteration i patched", "changed hop j")
    patch.grid(False)
    return fig


def feature_patching_figure(frames: dict[str, pd.DataFrame]) -> Figure:
    """One row per dictionary label, one panel per patch of :data:`FEATURE_PATCHES`: the fraction of pairs whose
    answer became the counterfactual's, per changed hop and patched iteration.

    Args:
        frames: label -> :func:`~sst_interp.experiments.feature_patching.feature_patching`'s frame (a row per pair
            and iteration; the ``features_patching_<label>`` row's detail), tallied per cell here.
    """
    tables = {label: feature_patching_table(frame) for label, frame in frames.items()}
    fig = new_figure(3.2 * len(FEATURE_PATCHES), 2.9 * len(tables))
    panels = np.atleast_2d(fig.subplots(len(tables), len(FEATURE_PATCHES), squeeze=False))
    image = None
    for row, (label, table) in enumerate(tables.items()):
        for column, (value, title) in enumerate(FEATURE_PATCHES.items()):
            axes = panels[row, column]
            image = _heatmap(axes, table, value)
            style(axes, f"{title} ({label})", "iteration i patched", "changed hop j" if column == 0 else "")
            axes.grid(False)
    fig.colorbar(image, ax=panels.ravel().tolist(), label="answer became the counterfactual's")
    return fig


def write_feature_patching_figure(frames: dict[str, pd.DataFrame], out: Path) -> list[Path]:
    """Draw :func:`feature_patching_figure` into ``out`` (PNG and PDF); returns the paths."""
    return save_figure(feature_patching_figure(frames), out, FEATURE_PATCHING_FIGURE)


def write_organism_figure(resolution: pd.DataFrame, flips: pd.DataFrame, out: Path,
                          chance: float | None = None) -> list[Path]:
    """Draw :func:`organism_figure` into ``out`` (PNG and PDF); returns the paths."""
    return save_figure(organism_figure(resolution, flips, chance), out, ORGANISM_FIGURE)
