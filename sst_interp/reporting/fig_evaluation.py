"""fig:overthinking_sankey: pass/fail columns per flat depth and the four flows between consecutive depths."""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from sst_interp.reporting.artefacts import ArtefactData
from sst_interp.reporting.fig_common import BASE_FONT, FAIL, NEUTRAL, PASS, RECOVERY, REGRESSION, new_figure

BAR = 0.14
GAP = 0.04
FLOW_COLORS = {("pass", "pass"): PASS, ("pass", "fail"): REGRESSION, ("fail", "pass"): RECOVERY,
               ("fail", "fail"): FAIL}
FLOW_NAMES = {("pass", "pass"): "pass -> pass (stable correct)", ("pass", "fail"): "pass -> fail (regression)",
              ("fail", "pass"): "fail -> pass (recovery)", ("fail", "fail"): "fail -> fail (stable wrong)"}


def _ribbon(ax: Axes, x0: float, x1: float, src: tuple[float, float], dst: tuple[float, float], color: str) -> None:
    """A smooth band from the interval ``src`` at ``x0`` to ``dst`` at ``x1`` (cubic ease)."""
    t = np.linspace(0.0, 1.0, 60)
    ease = 3 * t ** 2 - 2 * t ** 3
    xs = x0 + (x1 - x0) * t
    lo = src[0] + (dst[0] - src[0]) * ease
    hi = src[1] + (dst[1] - src[1]) * ease
    ax.fill_between(xs, lo, hi, color=color, alpha=0.45, linewidth=0)


def draw_sankey(data: ArtefactData) -> Figure:
    """Columns (pass green over fail red) at each flat depth, ribbons for the four flows, accuracy above each
    column, regression/recovery counts below each transition."""
    cols = data.tables["columns"].sort_values("depth").reset_index(drop=True)
    flows = data.tables["flows"]
    n = int(data.meta["n"])
    depths = cols["depth"].tolist()
    fig = new_figure(max(6.0, 2.2 * len(depths)), 4.6)
    ax = fig.add_subplot()
    h = 1.0 / n  # height of one question

    def segments(passes: int) -> dict[str, tuple[float, float]]:
        fail_top = (n - passes) * h
        return {"fail": (0.0, fail_top), "pass": (fail_top + GAP, fail_top + GAP + passes * h)}

    seg = {d: segments(int(p)) for d, p in zip(cols["depth"], cols["passes"])}
    for x, (d, row) in enumerate(zip(depths, cols.itertuples(index=False))):
        for state, color in (("pass", PASS), ("fail", FAIL)):
            lo, hi = seg[d][state]
            ax.add_patch(Rectangle((x - BAR / 2, lo), BAR, hi - lo, color=color, zorder=3))
            count = row.passes if state == "pass" else row.fails
            if hi - lo > 0.04:
                ax.text(x, (lo + hi) / 2, str(count), ha="center", va="center", color="white", fontsize=BASE_FONT,
                        fontweight="bold", zorder=4)
        ax.text(x, 1.0 + GAP + 0.03, f"{row.accuracy:.1f}%", ha="center", va="bottom", fontsize=BASE_FONT + 1,
                fontweight="bold")
    for x, (d0, d1) in enumerate(zip(depths[:-1], depths[1:])):
        part = flows[(flows["from_depth"] == d0) & (flows["to_depth"] == d1)]
        count = {(r.from_state, r.to_state): int(r.count) for r in part.itertuples(index=False)}
        out_cursor = {s: seg[d0][s][1] for s in ("pass", "fail")}
        in_cursor = {s: seg[d1][s][1] for s in ("pass", "fail")}
        for key in (("pass", "pass"), ("pass", "fail"), ("fail", "pass"), ("fail", "fail")):
            k = count.get(key, 0)
            if k == 0:
                continue
            src = (out_cursor[key[0]] - k * h, out_cursor[key[0]])
            dst = (in_cursor[key[1]] - k * h, in_cursor[key[1]])
            out_cursor[key[0]] -= k * h
            in_cursor[key[1]] -= k * h
            _ribbon(ax, x + BAR / 2, x + 1 - BAR / 2, src, dst, FLOW_COLORS[key])
        reg, rec = count.get(("pass", "fail"), 0), count.get(("fail", "pass"), 0)
        ax.text(x + 0.5, -0.08, f"{reg} regression{'' if reg == 1 else 's'}\n{rec} recover{'y' if rec == 1 else 'ies'}",
                ha="center", va="top", fontsize=BASE_FONT - 1, color=NEUTRAL)
    ax.set_xlim(-0.5, len(depths) - 0.5)
    ax.set_ylim(-0.22, 1.0 + GAP + 0.12)
    ax.set_xticks(range(len(depths)), [f"flat iter={d}" for d in depths], fontsize=BASE_FONT)
    ax.xaxis.set_ticks_position("top")
    ax.xaxis.set_label_position("top")
    ax.set_yticks([])
    for side in ("left", "right", "bottom", "top"):
        ax.spines[side].set_visible(False)
    ax.tick_params(axis="x", length=0, pad=18)
    ax.set_title(f"Pass/fail per question across flat depths (N = {n})", fontsize=BASE_FONT + 1)
    handles = [Patch(color=PASS, label="pass"), Patch(color=FAIL, label="fail")]
    handles += [Patch(color=FLOW_COLORS[k], alpha=0.45, label=FLOW_NAMES[k]) for k in FLOW_COLORS]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=BASE_FONT - 1, frameon=False)
    return fig
