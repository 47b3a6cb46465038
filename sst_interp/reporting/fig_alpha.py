"""Alpha figures (fig:alpha_quantile_ribbon, fig:alpha_pca_trajectory, fig:alpha_panels_*,
fig:alpha_specialisation_profile, fig:alpha_global_stats_over_training) and the training-loss curves."""

from __future__ import annotations

import math

from matplotlib import colormaps
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from sst_interp.reporting.artefacts import ArtefactData
from sst_interp.reporting.fig_common import (
    BASE_FONT,
    FAIL,
    NEUTRAL,
    bottom_legend,
    integer_ticks,
    message,
    new_figure,
    style,
)

LINE = "#1f4e9c"
SERIES_COLORS = {"sst": "#1f4e9c", "baseline": "#e377c2"}
SERIES_NAMES = {"sst": "SST", "baseline": "matched baseline"}
EMA_MIN_ALPHA = 0.02


def draw_ribbon(data: ArtefactData) -> Figure:
    """p5-p95 (outer) and p25-p75 (inner) bands, the median and mean per layer, alpha_init dashed."""
    frame = data.tables["ribbon"]
    fig = new_figure(6.5, 4.0)
    ax = fig.add_subplot()
    x = frame["layer"]
    ax.fill_between(x, frame["p5"], frame["p95"], color=LINE, alpha=0.18, linewidth=0, label="p5-p95")
    ax.fill_between(x, frame["p25"], frame["p75"], color=LINE, alpha=0.35, linewidth=0, label="p25-p75")
    ax.plot(x, frame["p50"], color=LINE, linewidth=1.8, label="median")
    ax.plot(x, frame["mean"], color="black", linewidth=0.9, linestyle=":", label="mean")
    ax.axhline(float(data.meta["alpha_init"]), color=FAIL, linestyle="--", linewidth=1,
               label=f"alpha_init = {float(data.meta['alpha_init']):.4f}")
    style(ax, "Per-layer distribution of learned alpha", "layer", "alpha")
    integer_ticks(ax)
    bottom_legend(fig, [ax], ncol=5)
    return fig


def draw_pca(data: ArtefactData) -> Figure:
    """PC1 vs PC2 (and PC2 vs PC3 when there is a third component), points coloured by layer and joined in order."""
    coords = data.tables["coords"]
    explained = data.meta["explained"]
    pcs = [c for c in coords.columns if c.startswith("pc")]
    pairs = [(pcs[0], pcs[1])] + ([(pcs[1], pcs[2])] if len(pcs) >= 3 else []) if len(pcs) >= 2 else []
    fig = new_figure(4.6 * max(len(pairs), 1) + 1.0, 4.2)
    if not pairs:
        message(fig.add_subplot(), "a single principal component: no trajectory to draw")
        return fig
    axes = fig.subplots(1, len(pairs), squeeze=False).ravel()
    layers = coords["layer"].to_numpy()
    norm = Normalize(layers.min(), layers.max())
    for ax, (a, b) in zip(axes, pairs):
        ax.plot(coords[a], coords[b], color=NEUTRAL, linewidth=0.8, zorder=1)
        points = ax.scatter(coords[a], coords[b], c=layers, cmap="viridis", norm=norm, s=28, zorder=2,
                            edgecolors="black", linewidths=0.3)
        ia, ib = pcs.index(a), pcs.index(b)
        style(ax, "", f"{a.upper()} ({explained[ia]:.1%})", f"{b.upper()} ({explained[ib]:.1%})")
        # PC scores of alpha deviations are ~1e-3: few ticks in scientific notation keep the labels apart.
        ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.ticklabel_format(axis="both", style="sci", scilimits=(-2, 2))
    bar = fig.colorbar(points, ax=list(axes), shrink=0.85)
    bar.set_label("layer", fontsize=BASE_FONT)
    fig.suptitle(f"Depth-ordered trajectory of alpha deviations (adjacent / all-pairs distance "
                 f"{data.meta['adjacent_ratio']:.2f})", fontsize=BASE_FONT + 1)
    return fig


def _panels(data: ArtefactData, column: str, cmap: str, vmin: float, vmax: float, title: str,
            bar_label: str) -> Figure:
    cells = data.tables["cells"]
    rows, cols = int(data.meta["rows"]), int(data.meta["cols"])
    layers = list(dict.fromkeys(cells["layer"].tolist()))
    n = len(layers)
    ncols = n if n <= 4 else 8
    nrows = math.ceil(n / ncols)
    panel_w = 2.3 if n <= 4 else 1.25
    fig = new_figure(panel_w * ncols + 1.0, panel_w * nrows * rows / max(cols, 1) + 1.0)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    image = None
    for ax, (layer, part) in zip(axes, cells.groupby("layer", sort=False)):
        grid = part.sort_values("dim")[column].to_numpy().reshape(rows, cols)
        image = ax.imshow(grid, cmap=cmap, vmin=vmin, vmax=vmax, aspect="equal", interpolation="nearest")
        ax.set_title(f"layer {layer}", fontsize=BASE_FONT - (0 if n <= 4 else 2))
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in axes[n:]:
        ax.set_visible(False)
    if image is not None:
        bar = fig.colorbar(image, ax=list(axes[:n]), shrink=0.8 if n <= 4 else 0.5)
        bar.set_label(bar_label, fontsize=BASE_FONT)
    fig.suptitle(f"{title} ({rows} x {cols} reshape of the {rows * cols} dimensions)", fontsize=BASE_FONT + 1)
    return fig


def draw_panels_raw(data: ArtefactData) -> Figure:
    """Raw alpha grids on the shared p1-p99 scale."""
    lo, hi = (float(v) for v in data.meta["raw_range"])
    if hi - lo < 1e-9:
        lo, hi = lo - 1e-4, hi + 1e-4
    return _panels(data, "alpha", "viridis", lo, hi, "Learned alpha", "alpha (p1-p99 scale)")


def draw_panels_deviation(data: ArtefactData) -> Figure:
    """Deviation grids on a symmetric diverging scale (red above alpha_init, blue below)."""
    limit = max(float(data.meta["deviation_limit"]), 1e-6)
    return _panels(data, "deviation", "RdBu_r", -limit, limit, "alpha - alpha_init", "alpha - alpha_init")


def draw_specialisation(data: ArtefactData) -> Figure:
    """Bands of |alpha - alpha_init| percentiles per layer, the median in red, selected layers marked."""
    frame = data.tables["profile"]
    fig = new_figure(6.5, 4.0)
    ax = fig.add_subplot()
    x = frame["layer"]
    pcts = [c for c in frame.columns if c.startswith("p") and c[1:].isdigit()]
    upper = [c for c in pcts if int(c[1:]) > 50]
    cmap = colormaps["Blues"]
    for i, c in enumerate(sorted(upper, key=lambda c: -int(c[1:]))):
        ax.fill_between(x, 0, frame[c], color=cmap(0.25 + 0.15 * i), linewidth=0, label=f"up to {c}")
    if "p50" in frame:
        ax.plot(x, frame["p50"], color=FAIL, linewidth=1.8, label="median")
    if "p25" in frame:
        ax.plot(x, frame["p25"], color=FAIL, linewidth=0.8, linestyle=":", label="p25")
    for layer in data.meta.get("selected", []):
        ax.axvline(layer, color=NEUTRAL, linestyle="--", linewidth=0.7)
    style(ax, "Per-layer specialisation |alpha - alpha_init| (dashed: selected layers)", "layer",
          "|alpha - alpha_init|")
    integer_ticks(ax)
    bottom_legend(fig, [ax], ncol=6)
    return fig


def draw_losses(data: ArtefactData) -> Figure:
    """(a) training loss, raw (light) and moving average (solid); (b) validation loss as evaluated."""
    fig = new_figure(10.0, 4.0)
    train_ax, val_ax = fig.subplots(1, 2)
    for series in data.meta["series"]:
        log = data.tables[series].sort_values("step")
        color, name = SERIES_COLORS[series], SERIES_NAMES[series]
        train_ax.plot(log["step"], log["train_loss"], color=color, alpha=0.35, linewidth=0.8, label=f"{name} (raw)")
        # smoothing scaled to the log's length: ~1/20 of the steps, so the average does not lag short runs
        ema = log["train_loss"].ewm(alpha=min(0.3, max(EMA_MIN_ALPHA, 20.0 / max(len(log), 1))), adjust=True).mean()
        train_ax.plot(log["step"], ema, color=color, linewidth=1.8, label=f"{name} (moving average)")
        val = log.dropna(subset=["val_loss"])
        if len(val):
            val_ax.plot(val["step"], val["val_loss"], color=color, marker="o", markersize=4, linewidth=1.4,
                        label=f"{name} validation")
        else:
            val_ax.text(0.5, 0.5 if series == "sst" else 0.4, f"{name}: no validation rows", ha="center",
                        transform=val_ax.transAxes, fontsize=BASE_FONT)
    style(train_ax, "(a) training loss", "optimiser step", "loss")
    style(val_ax, "(b) validation loss", "optimiser step", "loss")
    bottom_legend(fig, [train_ax, val_ax], ncol=5)
    return fig


def draw_alpha_training(data: ArtefactData) -> Figure:
    """Global alpha mean (+- std band), min and max per training step."""
    stats = data.tables["stats"]
    fig = new_figure(6.5, 4.0)
    ax = fig.add_subplot()
    x = stats["step"]
    if "std" in stats:
        ax.fill_between(x, stats["mean"] - stats["std"], stats["mean"] + stats["std"], color=LINE, alpha=0.25,
                        linewidth=0, label="mean +- std")
    ax.plot(x, stats["mean"], color=LINE, linewidth=1.8, label="mean", marker="." if len(stats) < 30 else None)
    for col, ls in (("min", ":"), ("max", "--")):
        if col in stats:
            ax.plot(x, stats[col], color="black", linewidth=0.9, linestyle=ls, label=col)
    ax.axhline(float(data.meta["alpha_init"]), color=FAIL, linewidth=0.9, linestyle="-.", label="alpha_init")
    style(ax, "Blend coefficients over training (all layers and dimensions)", "optimiser step", "alpha")
    bottom_legend(fig, [ax], ncol=5)
    return fig


__all__ = ["draw_alpha_training", "draw_losses", "draw_panels_deviation", "draw_panels_raw", "draw_pca",
           "draw_ribbon", "draw_specialisation"]
