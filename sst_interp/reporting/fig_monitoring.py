"""fig:convergence_monitoring: L2 deltas by correct depth (a) and their (lack of) predictive power (b)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from sst_interp.reporting.artefacts import ArtefactData
from sst_interp.reporting.fig_common import FAIL, NEUTRAL, PASS, bottom_legend, message, new_figure, style

OUTCOME_COLORS = {"improves": PASS, "degrades": FAIL, "same": NEUTRAL}
N_BINS = 6


def _group_colors(groups: list[int]) -> dict[int, str]:
    cmap = colormaps["viridis"]
    real = sorted(g for g in groups if g >= 0)
    out = {g: cmap(i / max(len(real) - 1, 1) * 0.85) for i, g in enumerate(real)}
    out[-1] = NEUTRAL
    return out


def _group_name(g: int) -> str:
    return "never correct" if g < 0 else f"correct at iter={g}"


def _traces(ax: Axes, traces: pd.DataFrame, colors: dict[int, str], transitions: list[int]) -> None:
    sub = traces[traces["transition"].isin(transitions)]
    wide = sub.pivot_table(index=["question_id", "position", "correct_depth"], columns="transition", values="delta")
    wide = wide.reindex(columns=transitions)
    xs = np.asarray(transitions, dtype=float)
    lines = [np.column_stack([xs, row]) for row in wide.to_numpy()]
    groups_of_lines = wide.index.get_level_values("correct_depth").astype(int)
    ax.add_collection(LineCollection(lines, colors=[colors[g] for g in groups_of_lines], alpha=0.25,
                                     linewidths=0.6))
    ax.autoscale_view()
    groups = list(sub.groupby("correct_depth"))
    for i, (g, part) in enumerate(groups):
        # drawn widest first, so medians that coincide (the point of panel a) stay visible as nested lines
        width = 1.2 + 1.1 * (len(groups) - 1 - i)
        med = part.groupby("transition")["delta"].median()
        ax.plot(med.index, med.to_numpy(), color=colors[int(g)], linewidth=width, marker="o", markersize=2 + width,
                label=f"{_group_name(int(g))} (median)", zorder=3 + i)
    ax.set_xticks(transitions, [f"{t}->{t + 1}" for t in transitions])


def draw_convergence(data: ArtefactData) -> Figure:
    """(a) per-position L2 delta over transitions coloured by correct depth (all, then the later transitions
    zoomed); (b) current vs next delta coloured by the next step's outcome, and the outcome mix per current-delta
    bin."""
    traces, points = data.tables["traces"], data.tables["points"]
    colors = _group_colors(sorted({int(g) for g in traces["correct_depth"]}))
    transitions = sorted(int(t) for t in traces["transition"].unique())
    fig = new_figure(11.0, 7.4)
    (a_all, a_zoom), (b_scatter, b_bins) = fig.subplots(2, 2)
    _traces(a_all, traces, colors, transitions)
    style(a_all, f"(a) L2 delta between successive iterations (layer {data.meta.get('layer')})", "transition",
          "L2 delta")
    later = transitions[1:]
    if later:
        _traces(a_zoom, traces, colors, later)
        vals = traces.loc[traces["transition"].isin(later), "delta"]
        a_zoom.set_ylim(0, float(np.nanpercentile(vals, 99)) * 1.1 if len(vals) else 1.0)
        style(a_zoom, "(a') later transitions, zoomed (y up to p99)", "transition", "L2 delta")
    else:
        message(a_zoom, "one transition only: nothing to zoom")
    if points.empty:
        message(b_scatter, "no decision points")
        message(b_bins, "no decision points")
    else:
        for outcome in ("same", "improves", "degrades"):
            part = points[points["outcome"] == outcome]
            if len(part):
                b_scatter.scatter(part["current_delta"], part["next_delta"], s=9, alpha=0.6,
                                  color=OUTCOME_COLORS[outcome], label=f"next step {outcome} ({len(part)})",
                                  edgecolors="none")
        if (points[["current_delta", "next_delta"]] > 0).all().all():
            b_scatter.set_xscale("log")
            b_scatter.set_yscale("log")
        style(b_scatter, "(b) current delta vs next delta", "current L2 delta", "next L2 delta")
        _outcome_bins(b_bins, points)
    auroc = data.meta.get("auroc")
    if auroc is not None:
        fig.suptitle(f"L2 convergence monitoring: AUROC of the current delta for degrades vs improves = {auroc:.2f}, "
                     f"Mann-Whitney p = {data.meta.get('mann_whitney_p'):.3g}", fontsize=10)
    bottom_legend(fig, [a_all, b_scatter, b_bins], ncol=4)
    return fig


def _outcome_bins(ax: Axes, points: pd.DataFrame) -> None:
    """Stacked fraction of next-step outcomes per quantile bin of the current delta."""
    values = points["current_delta"].to_numpy()
    edges = np.unique(np.quantile(values, np.linspace(0, 1, N_BINS + 1)))
    if edges.size < 2:
        message(ax, "every current delta is equal")
        return
    bins = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, edges.size - 2)
    counts = pd.crosstab(bins, points["outcome"]).reindex(columns=["improves", "degrades", "same"], fill_value=0)
    frac = counts.div(counts.sum(axis=1), axis=0)
    x = np.arange(len(frac))
    bottom = np.zeros(len(frac))
    for outcome in ("improves", "degrades", "same"):
        ax.bar(x, frac[outcome], bottom=bottom, color=OUTCOME_COLORS[outcome], alpha=0.8, width=0.8)
        bottom += frac[outcome].to_numpy()
    labels = [f"{edges[i]:.3g}-\n{edges[i + 1]:.3g}" for i in frac.index]
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylim(0, 1)
    style(ax, "(b') P(next outcome | current delta bin)", "current L2 delta (quantile bins)", "fraction of points")
