"""fig:halt_signal (the probe's in-sample logit over every labelled timestep, labelled as such) and
fig:feature_position_grid."""

from __future__ import annotations

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from sst_interp.reporting.artefacts import ArtefactData
from sst_interp.reporting.fig_common import (
    BASE_FONT,
    FAIL,
    NEUTRAL,
    RECOVERY,
    REGRESSION,
    bottom_legend,
    new_figure,
    style,
)

KIND_COLORS = {"must_halt": FAIL, "continue": REGRESSION, "safe": RECOVERY}
KIND_NAMES = {"must_halt": "MUST HALT question", "continue": "continue question", "safe": "SAFE question"}
MARKERS = {  # marker type -> (matplotlib marker, colour, label, filled)
    "detected_halt": ("o", FAIL, "detected halt", True),
    "missed_halt": ("o", FAIL, "missed halt (MUST HALT below threshold)", False),
    "false_halt_harmless": ("D", "#9467bd", "harmless false halt", True),
    "missed_continue": ("X", "black", "missed continue (halted too early)", True),
    "below": (".", NEUTRAL, "SAFE below threshold", True),
}


def draw_halt_signal(data: ArtefactData) -> Figure:
    """Top: logit histogram per class; middle: per-question strip; bottom: every timestep at its depth."""
    ts = data.tables["timesteps"]
    summary = data.tables["summary"].set_index("class")
    threshold = float(data.meta["threshold"])
    fig = new_figure(9.5, 9.0)
    top, mid, bottom = fig.subplots(3, 1)
    logits = ts["logit"].to_numpy(dtype=float)
    bins = np.linspace(min(logits.min(), threshold) - 0.5, max(logits.max(), threshold) + 0.5, 31)
    for cls, flag, color in (("safe", False, RECOVERY), ("must_halt", True, FAIL)):
        part = ts.loc[ts["must_halt"] == flag, "logit"]
        if len(part):
            row = summary.loc[cls]
            top.hist(part, bins=bins, color=color, alpha=0.55,
                     label=f"{'MUST HALT' if flag else 'SAFE'} timesteps (n={len(part)}, mean {row['mean']:.2f}, "
                           f"std {row['std']:.2f})" if len(part) > 1 else
                     f"{'MUST HALT' if flag else 'SAFE'} timestep (n=1, logit {row['mean']:.2f})")
    top.axvline(threshold, color="black", linestyle="--", linewidth=1, label=f"threshold {threshold:.3f}")
    gap = summary["gap_between_means"].iloc[0]
    # In-sample: the probe was trained on these very timesteps, so the gap is not evidence (issue 12); say so.
    style(top, f"In-sample halt logit at layer {data.meta.get('layer')} (gap between class means {gap:.2f}; "
               "probe trained on these timesteps, not evidence: see LOOCV)", "probe logit",
          "timesteps")
    order = ts.assign(_k=ts["question_kind"].map({"must_halt": 0, "continue": 1, "safe": 2}))
    order = order.sort_values(["_k", "question_id"], kind="stable")
    qpos = {q: i for i, q in enumerate(dict.fromkeys(order["question_id"]))}
    for kind, part in order.groupby("question_kind", sort=False):
        mid.scatter([qpos[q] for q in part["question_id"]], part["logit"], s=12, color=KIND_COLORS.get(kind, NEUTRAL),
                    alpha=0.8, label=KIND_NAMES.get(kind, kind), edgecolors="none")
    mid.axhline(threshold, color="black", linestyle="--", linewidth=1)
    style(mid, "Per question (sorted by kind)", f"question ({len(qpos)})", "probe logit")
    rng = np.random.default_rng(0)
    for marker, (symbol, color, label, filled) in MARKERS.items():
        part = ts[ts["marker"] == marker]
        if part.empty:
            continue
        x = part["depth"].to_numpy(dtype=float) + rng.uniform(-0.18, 0.18, len(part))
        bottom.scatter(x, part["logit"], marker=symbol, s=22 if marker != "below" else 30,
                       facecolors=color if filled else "none", edgecolors=color, linewidths=0.8,
                       label=f"{label} ({len(part)})", alpha=0.85)
    bottom.axhline(threshold, color="black", linestyle="--", linewidth=1)
    depths = sorted(int(d) for d in ts["depth"].unique())
    bottom.set_xticks(depths, [f"iter={d}" for d in depths])
    style(bottom, "Every timestep at its iteration depth", "iteration depth", "probe logit")
    bottom_legend(fig, [top, mid, bottom], ncol=3)
    return fig


def draw_feature_grid(data: ArtefactData) -> Figure:
    """Every hidden dimension as a cell (``rows x cols``, dim 0 bottom left); essential ones coloured by weight
    importance, the rest grey."""
    rows, cols, d = int(data.meta["rows"]), int(data.meta["cols"]), int(data.meta["d"])
    ess = data.tables["essential"]
    grid = np.full(rows * cols, np.nan)
    grid[ess["dim"].to_numpy(dtype=np.int64)] = ess["importance"].to_numpy(dtype=float)
    background = np.where(np.arange(rows * cols) < d, 0.0, np.nan).reshape(rows, cols)
    height = max(4.0, min(10.0, rows * 0.11 + 1.4))
    # equal-aspect cells: the grid is (height less the title and labels) x cols / rows wide, plus the colour bar and
    # labels; a width set from the columns alone left a tall, narrow grid (d=128: 16 x 8) in an empty figure
    fig = new_figure(max(4.2, min(9.0, (height - 1.4) * cols / rows + 2.4)), height)
    ax = fig.add_subplot()
    grey = ListedColormap(["#d4d4d4"]).with_extremes(bad="white")  # white: cells past d when the grid is not full
    ax.imshow(np.ma.masked_invalid(background), origin="lower", cmap=grey, aspect="equal", interpolation="nearest")
    image = ax.imshow(np.ma.masked_invalid(grid.reshape(rows, cols)), origin="lower", cmap="plasma",
                      aspect="equal", interpolation="nearest")
    bar = fig.colorbar(image, ax=ax, shrink=0.8)
    bar.set_label("effective weight importance", fontsize=BASE_FONT)
    style(ax, f"{len(ess)} essential of {d} dimensions at layer {data.meta.get('layer')}\n(grey: the other dimensions)",
          f"dim mod {cols}", f"dim // {cols}")
    ax.grid(False)
    return fig
