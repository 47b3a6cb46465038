"""Overlap heatmaps (fig:overlap_heatmap, fig:overlap_heatmap_zoom) and layer profiles (fig:layer_profile,
fig:layer_profile_per_position, fig:layer_profile_512pos)."""

from __future__ import annotations

import math
import textwrap

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from sst_interp.reporting.artefacts import ArtefactData
from sst_interp.reporting.fig_common import (
    BASE_FONT,
    bottom_legend,
    draw_profile,
    message,
    new_figure,
    overlap_ylim,
    style,
)

HEAT_CMAP = "magma"
THRESHOLD_COLOR = "#00c8ff"


def draw_heatmap(data: ArtefactData) -> Figure:
    """Layers (rows, layer 0 at the bottom) x generated positions (columns), colour = top-k overlap; the GMM
    threshold is marked on the colour bar and low-overlap positions by triangles above the map."""
    cells = data.tables["cells"]
    meta = data.meta
    threshold = float(meta["threshold"])
    layers = np.arange(int(cells["layer"].min()), int(cells["layer"].max()) + 1)
    positions = np.arange(int(cells["position"].min()), int(cells["position"].max()) + 1)
    grid = np.full((layers.size, positions.size), np.nan)
    grid[cells["layer"].to_numpy() - layers[0], cells["position"].to_numpy() - positions[0]] = cells["overlap"]
    vmin = min(float(np.nanmin(grid)), threshold) - 0.01
    width = 6.5 if positions.size <= 16 else min(13.0, 6.0 + positions.size / 40)
    fig = new_figure(width, 4.4)
    ax = fig.add_subplot()
    cmap = colormaps[HEAT_CMAP].with_extremes(bad="#d9d9d9")
    image = ax.imshow(np.ma.masked_invalid(grid), origin="lower", aspect="auto", cmap=cmap, vmin=max(vmin, 0.0),
                      vmax=1.0, interpolation="nearest",
                      extent=(positions[0] - 0.5, positions[-1] + 0.5, layers[0] - 0.5, layers[-1] + 0.5))
    bar = fig.colorbar(image, ax=ax, pad=0.01)
    bar.set_label(f"top-k overlap (line: GMM threshold {threshold:.3f})", fontsize=BASE_FONT)
    bar.ax.axhline(threshold, color=THRESHOLD_COLOR, linewidth=2.5)
    bar.ax.tick_params(labelsize=BASE_FONT - 1)
    low = [p for p in meta.get("low_positions", []) if positions[0] <= p <= positions[-1]]
    if low:
        ax.plot(low, np.full(len(low), layers[-1] + 0.5), marker="v", linestyle="none", color=THRESHOLD_COLOR,
                markersize=5 if positions.size > 40 else 7, clip_on=False, markeredgecolor="black",
                markeredgewidth=0.4, label="low-overlap position")
    full = int(meta.get("full_positions") or 0)
    if not meta.get("zoom") and positions[0] < full <= positions[-1]:
        ax.axvline(full - 0.5, color="black", linestyle="--", linewidth=1.0)
        ax.text(full - 0.5, layers[0] - 0.5, " right of the line: top-k sketches ", color="black", ha="left",
                va="bottom", fontsize=BASE_FONT - 2, bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85})
    if positions.size <= 30:
        ax.set_xticks(positions)
    if layers.size <= 30:
        ax.set_yticks(layers)
    style(ax, "", "generated position", "layer")
    ax.set_title(f"question {meta['question_id']}: {meta.get('comparison', '')}", fontsize=BASE_FONT + 1, pad=12)
    ax.grid(False)
    return fig


def draw_profiles(data: ArtefactData) -> Figure:
    """One panel per profile in ``meta['panels']``: median and percentile bands (or traces for N < 5) over layers,
    the threshold dashed; panels share the y axis and one legend sits below them."""
    panels = data.meta["panels"]
    threshold = data.meta.get("threshold")
    n = len(panels)
    ncols = n if n <= 3 else min(5, math.ceil(n / math.ceil(n / 5)))
    nrows = math.ceil(n / ncols)
    fig = new_figure(max(5.0, (3.8 if ncols <= 3 else 3.0) * ncols), 2.7 * nrows + 0.9)
    axes = fig.subplots(nrows, ncols, sharey=True, squeeze=False).ravel()
    frames = []
    filled: list[int] = []
    for i, (ax, panel) in enumerate(zip(axes, panels)):
        if panel.get("key") is None:  # a panel the run cannot fill: say why instead of leaving it blank
            message(ax, "\n".join(textwrap.wrap(str(panel.get("message", "no data")), 32)))
            style(ax, f"{panel['title']} (N = 0)", "layer", "")
            ax.grid(False)
            continue
        stats = data.tables[f"stats_{panel['key']}"]
        traces = data.tables.get(f"traces_{panel['key']}")
        draw_profile(ax, stats, traces, threshold)
        filled.append(i)
        frames += [stats, traces] if traces is not None else [stats]
        style(ax, f"{panel['title']} (N = {panel['n']})", "layer", "top-k overlap" if i % ncols == 0 else "")
    for ax in axes[n:]:
        ax.set_visible(False)
    # Shared y ticks are labelled on a row's first panel only; when that panel holds no data (its labels are
    # switched off), label the row's first panel that does, so no row is left without a readable y axis.
    for row in range(nrows):
        row_filled = [i for i in filled if i // ncols == row]
        if row_filled and row_filled[0] % ncols != 0:
            axes[row_filled[0]].tick_params(labelleft=True)
            axes[row_filled[0]].set_ylabel("top-k overlap")
    overlap_ylim(axes[0], frames, threshold)
    comparison = data.meta.get("comparison")
    if comparison:
        fig.suptitle(f"Layer profile of top-k overlap ({comparison})", fontsize=BASE_FONT + 1)
    bottom_legend(fig, list(axes[:n]))
    return fig
