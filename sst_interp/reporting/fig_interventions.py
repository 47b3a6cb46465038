"""fig_intervention_trace_heatmap: causal tracing across depths as heatmaps per experiment (layer x offset from each
question's target, for its own depth-k states and for the resampled control; layer x iteration at position 0),
coloured by the mean indirect effect on the target token's log-prob."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sst_interp.experiments.tables import PATCHED_OWN, PATCHED_RESAMPLED
from sst_interp.reporting.artefacts import ArtefactData
from sst_interp.reporting.fig_common import BASE_FONT, new_figure, style


def _grid(frame: pd.DataFrame, column: str) -> tuple[np.ndarray, list[int], list[int]]:
    """[layers, columns] of the mean indirect effect (NaN where nothing was measured)."""
    layers = sorted(frame["layer"].unique())
    columns = sorted(frame[column].unique())
    grid = np.full((len(layers), len(columns)), np.nan)
    for row in frame.itertuples():
        grid[layers.index(row.layer), columns.index(getattr(row, column))] = row.indirect_effect_mean
    return grid, layers, columns


def draw_trace(data: ArtefactData) -> Figure:
    """One row of panels per trace experiment, sharing a symmetric colour scale centred on 0: layer x offset from
    each question's target (the question's own depth-k states patched in), the same with another question's states
    (the resampled control, where the experiment ran it), and layer x depth-k iteration at position 0. Each offset
    column is labelled with its question count."""
    aligned, iterations = data.tables["layer_offset"], data.tables["layer_iteration"]
    names = list(pd.unique(aligned["experiment"]))
    panels = [(PATCHED_OWN, "own depth-k states"), (PATCHED_RESAMPLED, "another question's (control)")]
    panels = [(key, title) for key, title in panels if (aligned["patched"] == key).any()]
    fig = new_figure(4.5 * (len(panels) + 1), 3.4 * len(names))
    axes = fig.subplots(len(names), len(panels) + 1, squeeze=False)
    limit = float(np.nanmax(np.abs(np.concatenate([aligned["indirect_effect_mean"].to_numpy(float),
                                                  iterations["indirect_effect_mean"].to_numpy(float)]))))
    limit = limit if np.isfinite(limit) and limit > 0 else 1.0
    image = None
    for row, name in enumerate(names):
        mine = aligned[aligned["experiment"] == name]
        frames = [(mine[mine["patched"] == key], "offset", f"layer x offset, {title}") for key, title in panels]
        frames.append((iterations[iterations["experiment"] == name], "iteration", "layer x iteration, position 0"))
        for ax, (frame, column, where) in zip(axes[row], frames):
            grid, layers, columns = _grid(frame, column)
            image = ax.imshow(grid, aspect="auto", origin="lower", cmap="RdBu_r", vmin=-limit, vmax=limit,
                              interpolation="nearest")
            ax.set_yticks(range(len(layers)), [str(v) for v in layers], fontsize=BASE_FONT - 2)
            if column == "offset":
                counts = frame.groupby("offset")["n_questions"].max()
                labels = [f"{v}\nn={int(counts[v])}" for v in columns]
                label = "patched position - target position"
            else:
                labels, label = [str(v) for v in columns], "depth-k iteration patched"
            ax.set_xticks(range(len(columns)), labels, fontsize=BASE_FONT - 3)
            style(ax, f"{name}: {where}", label, "layer")
    if image is not None:
        bar = fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8)
        bar.set_label("indirect effect on the target log-prob (nats)", fontsize=BASE_FONT)
    return fig
