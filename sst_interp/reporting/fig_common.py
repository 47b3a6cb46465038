"""Shared figure plumbing: figures on the Agg canvas (no pyplot state), saving as PNG and PDF, colours, and the
percentile-band drawing used by every layer profile."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from sst_interp.outputs import write_output

PNG_DPI = 150
PASS = "#2ca02c"
FAIL = "#d62728"
REGRESSION = "#ff7f0e"
RECOVERY = "#1f77b4"
NEUTRAL = "#7f7f7f"
#: Percentile bands of a profile, widest first: (low column, high column, label, opacity).
BANDS: tuple[tuple[str, str, str, float], ...] = (
    ("p5", "p95", "p5-p95", 0.15),
    ("p10", "p90", "p10-p90", 0.25),
    ("p25", "p75", "IQR (p25-p75)", 0.4),
)
BASE_FONT = 9


def new_figure(width: float, height: float) -> Figure:
    """A figure of ``width`` x ``height`` inches with constrained layout on its own Agg canvas."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, out: Path, name: str) -> list[Path]:
    """Write ``<out>/<name>.png`` (150 dpi) and ``.pdf``; returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    png, pdf = out / f"{name}.png", out / f"{name}.pdf"
    for target, options in ((png, {"dpi": PNG_DPI}), (pdf, {})):
        buffer = io.BytesIO()  # drawn in memory, then written whole (no partial figure on a full disk)
        fig.savefig(buffer, format=target.suffix[1:], **options)
        write_output(target, buffer.getvalue())
    return [png, pdf]


def style(ax: Axes, title: str = "", xlabel: str = "", ylabel: str = "") -> None:
    """Title, axis labels and a light grid at the shared font size."""
    if title:
        ax.set_title(title, fontsize=BASE_FONT + 1)
    if xlabel:
        ax.set_xlabel(xlabel, fontsize=BASE_FONT)
    if ylabel:
        ax.set_ylabel(ylabel, fontsize=BASE_FONT)
    ax.tick_params(labelsize=BASE_FONT - 1)
    ax.grid(True, linewidth=0.4, alpha=0.4)


def integer_ticks(ax: Axes, axis: str = "x") -> None:
    """Integer-only ticks (layers, positions, depths)."""
    (ax.xaxis if axis == "x" else ax.yaxis).set_major_locator(MaxNLocator(integer=True))


def message(ax: Axes, text: str) -> None:
    """An axis that says why it holds no data (instead of an empty panel)."""
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=BASE_FONT, wrap=True, transform=ax.transAxes)
    # tick_params, not set_*ticks: the axis may share its y ticks with panels that do hold data
    ax.tick_params(left=False, labelleft=False, bottom=False, labelbottom=False)


def draw_profile(ax: Axes, stats: pd.DataFrame, traces: pd.DataFrame | None, threshold: float | None,
                 color: str = "#1f4e9c", min_band_n: int = 5) -> None:
    """Median line with IQR / p10-p90 / p5-p95 bands over layers, or the individual traces when N < ``min_band_n``.

    ``stats``: columns layer, n, median, p5, p10, p25, p75, p90, p95 (a LayerProfile table);
    ``traces``: long form trace, layer, overlap.
    """
    layers = stats["layer"].to_numpy()
    n = int(stats["n"].max()) if len(stats) else 0
    if n >= min_band_n or traces is None or traces.empty:
        for lo, hi, label, alpha in BANDS:
            ax.fill_between(layers, stats[lo], stats[hi], color=color, alpha=alpha, linewidth=0, label=label)
        ax.plot(layers, stats["median"], color=color, linewidth=1.8, label="median")
    else:
        for i, (_, trace) in enumerate(traces.groupby("trace", sort=True)):
            ax.plot(trace["layer"], trace["overlap"], color=color, linewidth=1.0, alpha=0.8, marker=".",
                    markersize=3, label="individual traces (N < 5)" if i == 0 else None)
    if threshold is not None:
        ax.axhline(threshold, color=FAIL, linestyle="--", linewidth=0.9, label=f"threshold {threshold:.3f}")
    integer_ticks(ax)


def overlap_ylim(ax: Axes, frames: Sequence[pd.DataFrame], threshold: float | None) -> None:
    """y range from the lowest plotted value (bands or traces) to just above 1."""
    lows = [float(np.nanmin(f[c])) for f in frames for c in ("p5", "overlap") if c in f and len(f)]
    low = min(lows + ([threshold] if threshold is not None else [])) if lows else 0.0
    pad = max(0.01, 0.05 * (1.0 - low))
    ax.set_ylim(max(0.0, low - pad), 1.0 + pad / 2)


def bottom_legend(fig: Figure, axes: Sequence[Axes], ncol: int = 6) -> None:
    """One legend for the figure, below the panels (so it never hides data)."""
    handles, labels, seen = [], [], set()
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in seen:
                seen.add(label)
                handles.append(h)
                labels.append(label)
    if handles:
        longest = max(len(label) for label in labels)
        fits = max(1, int(fig.get_figwidth() / (0.45 + 0.075 * longest)))  # entries that fit side by side
        fig.legend(handles, labels, loc="outside lower center", ncol=min(ncol, len(handles), fits),
                   fontsize=BASE_FONT - 1, frameon=False)
