"""fig_intervention_trace_heatmap: causal tracing across depths as two heatmaps per experiment (layer x position, and
layer x iteration at position 0), coloured by the mean indirect effect on the target token's log-prob."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

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
    """One row of two panels per trace experiment, sharing a symmetric colour scale centred on 0."""
    positions, iterations = data.tables["layer_position"], data.tables["layer_iteration"]
    names = list(pd.unique(positions["experiment"]))
    fig = new_figure(9.0, 3.2 * len(names))
    axes = fig.subplots(len(names), 2, squeeze=False)
    limit = float(np.nanmax(np.abs(np.concatenate([positions["indirect_effect_mean"].to_numpy(float),
                                                  iterations["indirect_effect_mean"].to_numpy(float)]))))
    limit = limit if np.isfinite(limit) and limit > 0 else 1.0
    image = None
    for row, name in enumerate(names):
        for ax, frame, column, label in ((axes[row, 0], positions, "position", "generated position"),
                                         (axes[row, 1], iterations, "iteration", "depth-k iteration patched")):
            grid, layers, columns = _grid(frame[frame["experiment"] == name], column)
            image = ax.imshow(grid, aspect="auto", origin="lower", cmap="RdBu_r", vmin=-limit, vmax=limit,
                              interpolation="nearest")
            ax.set_yticks(range(len(layers)), [str(v) for v in layers], fontsize=BASE_FONT - 2)
            ax.set_xticks(range(len(columns)), [str(v) for v in columns], fontsize=BASE_FONT - 2)
            where = "layer x position" if column == "position" else "layer x iteration, position 0"
            style(ax, f"{name}: {where}", label, "layer")
    if image is not None:
        bar = fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8)
        bar.set_label("indirect effect on the target log-prob (nats)", fontsize=BASE_FONT)
    return fig
