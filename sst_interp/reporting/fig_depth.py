"""Per-position depth figures: accuracy against iterations per token (the Pareto front), and where each rule stops
split by overlap regime."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from sst_interp.reporting.artefacts import ArtefactData
from sst_interp.reporting.fig_common import (
    FAIL,
    NEUTRAL,
    PASS,
    RECOVERY,
    REGRESSION,
    bottom_legend,
    integer_ticks,
    message,
    new_figure,
    style,
)

RULE_COLORS = {"kl": RECOVERY, "entropy": REGRESSION, "margin": "#9467bd", "state": PASS, "probe": "#8c564b"}
REGIME_COLORS = {"low_overlap": FAIL, "stable": RECOVERY, "unlabelled": NEUTRAL}


def _rule_of(policy: str) -> str:
    head = policy.split(":", 1)[0]
    return "probe" if head.startswith("probe") else head


def draw_pareto(data: ArtefactData) -> Figure:
    """Left: measured rows (fixed depths, staged oracle, live policy runs) as points with the front joined;
    simulated rows as vertical bars from their accuracy lower to upper bound at their estimated iterations.
    Right: the simulated rows' fraction of questions reproduced exactly against their estimated iterations."""
    points = data.tables["points"]
    fig = new_figure(11.0, 4.6)
    ax, exact_ax = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    if points.empty:
        message(ax, "no rows")
        message(exact_ax, "no rows")
        return fig
    sim = points[points["source"] == "simulated"]
    for rule, part in sim.groupby(sim["policy"].map(_rule_of)):
        color = RULE_COLORS.get(rule, NEUTRAL)
        ax.vlines(part["mean_iterations"], part["accuracy_low_pct"], part["accuracy_high_pct"], color=color,
                  alpha=0.35, linewidth=3, label=f"{rule} (simulated: accuracy bounds)")
        # a row whose every question is reproduced exactly has equal bounds: a bar of no length, drawn as a tick
        exact = part[part["accuracy_low_pct"] == part["accuracy_high_pct"]]
        ax.scatter(exact["mean_iterations"], exact["accuracy_low_pct"], marker="_", s=80, linewidths=3,
                   color=color, alpha=0.6)
        n = part["n_questions"].clip(lower=1)
        exact_ax.plot(part["mean_iterations"], 100.0 * part["exact_questions"] / n, marker="o", color=color,
                      label=f"{rule}")
    measured = points[points["source"] != "simulated"]
    legend_done: set[str] = set()
    for k, (_, row) in enumerate(measured.iterrows()):
        if row["source"] == "oracle":
            marker, color, kind = "*", NEUTRAL, "staged oracle (hindsight: never on the front)"
        elif str(row["policy"]).startswith("fixed:"):
            marker, color, kind = "s", "black", "fixed depth (live)"
        else:
            rule = _rule_of(str(row["policy"]))
            marker, color, kind = "o", RULE_COLORS.get(rule, NEUTRAL), f"{rule} (live policy run)"
        ax.scatter([row["mean_iterations"]], [row["accuracy_pct"]], marker=marker, s=70, color=color,
                   edgecolors="black", linewidths=0.5, zorder=4, label=None if kind in legend_done else kind)
        legend_done.add(kind)
        # The oracle's label goes up and to the left of its star: the star sits just left of a fixed depth whose
        # label runs right (below it, it met "fixed 3" on the demo run). Fixed depths alternate heights: points of
        # equal accuracy sit side by side and their labels would overlap.
        oracle = row["source"] == "oracle"
        ax.annotate(str(row["condition"]), (row["mean_iterations"], row["accuracy_pct"]), fontsize=7,
                    xytext=(-6, 6) if oracle else (4, 4 + 9 * (k % 2)), textcoords="offset points",
                    ha="right" if oracle else "left")
    front = measured[measured["pareto"].astype(bool)].sort_values("mean_iterations")
    if len(front):
        ax.plot(front["mean_iterations"], front["accuracy_pct"], color="black", linewidth=1, linestyle="--",
                label="front of the measured rows", zorder=3)
    top = float(np.nanmax([points["accuracy_high_pct"].max(), points["accuracy_pct"].max(), 1.0]))
    # a tenth of the axis above the highest point holds its label, which would otherwise run into the title
    highest = min(100.0, top * 1.15 + 2)
    ax.set_ylim(-2, highest + 0.1 * (highest + 2))
    style(ax, "Accuracy against compute (squares: fixed depths, star: staged oracle, circles: live policies)",
          "mean iterations per generated token", "accuracy (%)")
    if sim.empty:
        # the Pareto rows say why when the run's lens cannot be replayed (a family's logit lens); say it here too
        why = [str(n) for n in data.meta.get("notes", []) if str(n).startswith("no simulated rows")]
        message(exact_ax, "no simulated rows: the lens is not the emitted distribution" if why
                else "no simulated rows (not a replayable fixed-depth run)")
    else:
        exact_ax.set_ylim(-2, 102)
        style(exact_ax, "Simulated rows: questions reproduced exactly", "mean iterations per token (estimate)",
              "exact questions (%)")
    bottom_legend(fig, [ax, exact_ax], ncol=4)
    return fig


def draw_histogram(data: ArtefactData) -> Figure:
    """One panel per rule: the fraction of positions stopping at each iteration, bars per regime."""
    hist = data.tables["histogram"]
    rules = list(dict.fromkeys(hist["rule"]))
    fig = new_figure(3.2 * max(len(rules), 1) + 1.0, 3.8)
    axes = np.atleast_1d(fig.subplots(1, max(len(rules), 1), sharey=True))
    depth = int(data.meta.get("depth", hist["iterations"].max()))
    regimes = [r for r in ("low_overlap", "stable", "unlabelled") if r in set(hist["regime"])]
    width = 0.8 / max(len(regimes), 1)
    for ax, rule in zip(axes, rules):
        part = hist[hist["rule"] == rule]
        for j, regime in enumerate(regimes):
            sel = part[part["regime"] == regime].set_index("iterations")["fraction"].reindex(
                range(1, depth + 1), fill_value=0.0)
            total = int(part.loc[part["regime"] == regime, "positions"].sum())
            ax.bar(np.arange(1, depth + 1) + (j - (len(regimes) - 1) / 2) * width, sel.to_numpy(), width=width,
                   color=REGIME_COLORS[regime], label=f"{regime.replace('_', '-')} ({total} positions)"
                   if ax is axes[0] else None)
        rule_text, _, tau = str(part["policy"].iloc[0]).split(",", 1)[0].partition(":")
        title = f"margin > {float(tau):.3g}" if rule_text == "margin" else f"{rule_text} < {float(tau):.3g}"
        style(ax, title, "iterations run", "fraction of positions" if ax is axes[0] else "")
        integer_ticks(ax)
    fig.suptitle(f"Where each rule (at its median threshold) stops on the full-depth trajectory, max = {depth}; "
                 f"regimes at overlap threshold {data.meta.get('gmm_threshold', float('nan')):.4f}", fontsize=9)
    bottom_legend(fig, [axes[0]], ncol=3)
    return fig

