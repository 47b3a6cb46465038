"""The loss comparisons of several trainings (fig:sst_vs_nobias_loss, fig:sst_vs_baseline_training_loss,
fig:sst_vs_baseline_validation_loss): one curve per training, labelled by its config."""

from __future__ import annotations

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from sst_interp.reporting.artefacts import ArtefactData
from sst_interp.reporting.fig_alpha import EMA_MIN_ALPHA, SERIES_COLORS
from sst_interp.reporting.fig_common import BASE_FONT, bottom_legend, new_figure, style

#: One colour per training role, the same in every figure (the SST and the baseline as in fig:sst_vs_baseline_loss).
ROLE_COLORS = {"main": SERIES_COLORS["sst"], "baseline": SERIES_COLORS["baseline"], "alpha_init": "#d62728",
               "ema_variant": "#2ca02c", "other": "#7f7f7f"}


def _colors(data: ArtefactData) -> list[str]:
    roles = list(data.meta.get("roles") or [])
    return [ROLE_COLORS.get(role, "#7f7f7f") for role in roles] + ["#7f7f7f"] * (len(data.meta["series"]) - len(roles))


def _training(ax: Axes, tables: dict[str, pd.DataFrame], series: list[str], colors: list[str]) -> None:
    for name, color in zip(series, colors):
        log = tables[name].sort_values("step")
        ax.plot(log["step"], log["train_loss"], color=color, alpha=0.35, linewidth=0.8, label=f"{name} (raw)")
        # the same smoothing as fig:sst_vs_baseline_loss: about 1/20 of the steps, so short runs do not lag
        ema = log["train_loss"].ewm(alpha=min(0.3, max(EMA_MIN_ALPHA, 20.0 / max(len(log), 1))), adjust=True).mean()
        ax.plot(log["step"], ema, color=color, linewidth=1.8, label=f"{name} (moving average)")
    style(ax, "Training loss", "optimiser step", "loss")


def _validation(ax: Axes, tables: dict[str, pd.DataFrame], series: list[str], colors: list[str]) -> None:
    for i, (name, color) in enumerate(zip(series, colors)):
        val = tables[name].dropna(subset=["val_loss"]).sort_values("step")
        if len(val):
            ax.plot(val["step"], val["val_loss"], color=color, marker="o", markersize=4,
                    linewidth=1.4, label=f"{name}")
        else:
            ax.text(0.5, 0.5 - 0.08 * i, f"{name}: no validation rows", ha="center", transform=ax.transAxes,
                    fontsize=BASE_FONT)
    style(ax, "Validation loss", "optimiser step", "loss")


def draw_both(data: ArtefactData) -> Figure:
    """(a) training loss, raw (light) and moving average (solid); (b) validation loss as evaluated."""
    fig = new_figure(10.0, 4.2)
    train_ax, val_ax = fig.subplots(1, 2)
    _training(train_ax, data.tables, list(data.meta["series"]), _colors(data))
    _validation(val_ax, data.tables, list(data.meta["series"]), _colors(data))
    train_ax.set_title("(a) training loss")
    val_ax.set_title("(b) validation loss")
    bottom_legend(fig, [train_ax, val_ax], ncol=2)
    return fig


def _one_panel(data: ArtefactData, height: float, panel) -> Figure:
    """One loss panel (``_training`` or ``_validation``) over every training, legend below."""
    fig = new_figure(6.5, height)
    ax = fig.add_subplot()
    panel(ax, data.tables, list(data.meta["series"]), _colors(data))
    bottom_legend(fig, [ax], ncol=2)
    return fig


def draw_training(data: ArtefactData) -> Figure:
    """Training loss of every training, raw (light) and moving average (solid)."""
    return _one_panel(data, 4.4, _training)


def draw_validation(data: ArtefactData) -> Figure:
    """Validation loss of every training, as evaluated."""
    return _one_panel(data, 4.0, _validation)
