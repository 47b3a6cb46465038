"""Drawings of the cross-family artefacts: one line per run, labelled with its family (docs/families.md)."""

from __future__ import annotations

from matplotlib.figure import Figure

from sst_interp.reporting.artefacts import ArtefactData
from sst_interp.reporting.fig_common import bottom_legend, integer_ticks, message, new_figure, style


def _label(row_run: str, family: str) -> str:
    return f"{row_run} ({family})"


def draw_state(data: ArtefactData) -> Figure:
    """Left: mean top-k overlap of the carried state between iterations i-1 and i; right: its relative L2 change;
    one line per run."""
    rows = data.tables["main"]
    fig = new_figure(10.0, 4.2)
    overlap_ax, change_ax = fig.subplots(1, 2)
    if rows.empty:
        message(overlap_ax, "no rows")
        message(change_ax, "no rows")
        return fig
    for (run, family), part in rows.groupby(["run", "family"], sort=False):
        part = part.sort_values("iteration")
        overlap_ax.plot(part["iteration"], part["overlap"], marker="o", label=_label(run, family))
        change_ax.plot(part["iteration"], part["relative_change"], marker="o", label=_label(run, family))
    style(overlap_ax, "state top-k overlap", "iteration i (transition i-1 -> i)", "overlap with iteration i-1")
    style(change_ax, "state change", "iteration i (transition i-1 -> i)", "||s_i - s_(i-1)|| / ||s_(i-1)||")
    overlap_ax.set_ylim(0.0, 1.05)
    for ax in (overlap_ax, change_ax):
        integer_ticks(ax)
    bottom_legend(fig, [overlap_ax], ncol=3)
    return fig


def draw_capacity(data: ArtefactData) -> Figure:
    """Accuracy (dashed) and staged capacity (solid) per depth, one colour per run."""
    rows = data.tables["main"]
    fig = new_figure(7.0, 4.2)
    ax = fig.subplots()
    if rows.empty:
        message(ax, "no rows")
        return fig
    for (run, family), part in rows.groupby(["run", "family"], sort=False):
        part = part.sort_values("depth")
        line, = ax.plot(part["depth"], part["staged_capacity_pct"], marker="o",
                        label=f"{_label(run, family)}: staged capacity")
        ax.plot(part["depth"], part["accuracy_pct"], marker="s", linestyle="--", color=line.get_color(),
                label=f"{_label(run, family)}: accuracy")
    style(ax, "accuracy and staged capacity per depth", "depth (the family's loop count)", "% of questions")
    ax.set_ylim(-2.0, 102.0)  # percentages: a flat 0% line (random tiny models) must not get a +-0.04 axis
    integer_ticks(ax)
    bottom_legend(fig, [ax], ncol=2)
    return fig
