"""fig:feature_trajectories: a sparse dictionary's features followed through the loop, beside the basin shifts."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from sst_interp.reporting.artefacts import ArtefactData
from sst_interp.reporting.fig_common import BASE_FONT, RECOVERY, integer_ticks, message, new_figure, style


def draw_trajectories(data: ArtefactData) -> Figure:
    """Left: the features most often among a state's top features (rows, most often first), their mean activation
    per iteration (columns), labelled in each cell. Right: each state's Jaccard distance between iterations i and
    i+1 against its top-k overlap, one colour per pair, with the Spearman rho."""
    common, shifts, meta = data.tables["common"], data.tables["shifts"], data.meta
    fig = new_figure(11.0, 5.2)
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    if common.empty:
        message(left, "no feature was active")
    else:
        features = list(dict.fromkeys(common["feature"].tolist()))
        iterations = sorted(common["iteration"].unique().tolist())
        grid = common.pivot(index="feature", columns="iteration", values="activation_mean") \
            .reindex(index=features, columns=iterations).fillna(0.0).to_numpy()
        counts = common.drop_duplicates("feature").set_index("feature")["states"].reindex(features)
        image = left.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest")
        peak = float(np.nanmax(grid)) if grid.size else 0.0
        for (r, c), value in np.ndenumerate(grid):
            # light text on the dark low end of viridis, dark on its bright top
            left.text(c, r, f"{value:.2g}", ha="center", va="center", fontsize=BASE_FONT - 2,
                      color="black" if peak and value > 0.6 * peak else "white")
        left.set_xticks(range(len(iterations)), [str(i) for i in iterations])
        left.set_yticks(range(len(features)), [f"f{f} ({n})" for f, n in zip(features, counts)])
        bar = fig.colorbar(image, ax=left, shrink=0.85)
        bar.set_label("mean activation over states (0 where inactive)", fontsize=BASE_FONT)
        style(left, f"Top features through the loop (layer {meta.get('layer')}, depth {meta.get('depth')})",
              "iteration", f"feature (states where it is among the top {meta.get('top')})")
        left.grid(False)
    if shifts.empty or shifts["topk_overlap"].isna().all():
        message(right, "no consecutive iterations with a top-k overlap")
    else:
        pairs = shifts.groupby(["iteration_a", "iteration_b"], sort=True)
        colours = [RECOVERY, "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
        rng = np.random.default_rng(0)
        for n, ((i, j), group) in enumerate(pairs):
            # both measures take few values (k-sparse sets, top-k of d dimensions): jitter a little so points show
            x = group["topk_overlap"].to_numpy(dtype=float) + rng.uniform(-0.008, 0.008, len(group))
            y = group["jaccard_distance"].to_numpy(dtype=float) + rng.uniform(-0.008, 0.008, len(group))
            right.scatter(x, y, s=10, alpha=0.55, color=colours[n % len(colours)], label=f"{i} -> {j}",
                          edgecolors="none")
        right.legend(title="iterations", fontsize=BASE_FONT - 1, title_fontsize=BASE_FONT - 1, loc="best",
                     markerscale=1.8)
        rho = meta.get("spearman_rho")
        rho_text = "n/a" if rho is None or not np.isfinite(rho) else f"{rho:+.2f}"
        style(right, f"Basin shifts: feature-set change vs top-k overlap\n({meta.get('states')} states, "
              f"Spearman rho {rho_text})", "top-k overlap of the two states (paper)",
              "Jaccard distance of active features")
        right.set_ylim(-0.04, 1.04)
    integer_ticks(left, "x")
    return fig
