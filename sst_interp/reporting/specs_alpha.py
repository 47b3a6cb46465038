"""Learned blend coefficients (sec:learned_alpha, app:alpha_analysis) from an SST checkpoint, and the training
curves (fig:sst_vs_baseline_loss and the standalone curves, fig:alpha_global_stats_over_training) from training
logs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sst_interp.analyses import alpha as alpha_analysis
from sst_interp.analyses.layers import paper_layer
from sst_interp.analyses.results import NotApplicable
from sst_interp.errors import UsageError
from sst_interp.reporting import fig_alpha
from sst_interp.reporting.artefacts import ArtefactData, ArtefactSpec
from sst_interp.reporting.context import AlphaMatrix, ReportContext

FAMILY = "Learned blend coefficients and training"
LOSS_COLUMNS = ("step", "train_loss", "val_loss")


def _alpha(ctx: ReportContext, target: str | None) -> AlphaMatrix | NotApplicable:
    return ctx.alpha(target)


def _notes(a: AlphaMatrix) -> list[str]:
    notes = [f"checkpoint {a.source}: {a.alpha.shape[0]} layers x {a.alpha.shape[1]} dimensions; alpha_init = "
             f"{a.alpha_init:.5f}"]
    if not np.isclose(a.alpha_init, alpha_analysis.alpha_init()):
        notes.append(f"this checkpoint's alpha_init differs from the paper's {alpha_analysis.alpha_init():.5f}; "
                     "deviations are measured from the paper's")
    return notes


def ribbon(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
    """fig:alpha_quantile_ribbon: within-layer percentiles."""
    a = _alpha(ctx, target)
    if isinstance(a, NotApplicable):
        return a
    frame = alpha_analysis.quantile_ribbon(a.alpha).table().copy()
    frame["layer"] = a.layers
    return ArtefactData({"ribbon": frame}, {"alpha_init": a.alpha_init, "notes": _notes(a)})


def pca(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
    """fig:alpha_pca_trajectory: per-layer deviations on their top principal components."""
    a = _alpha(ctx, target)
    if isinstance(a, NotApplicable):
        return a
    result = alpha_analysis.alpha_pca(a.alpha, init=a.alpha_init)
    if isinstance(result, NotApplicable):
        return result
    frame = result.table().copy()
    frame["layer"] = a.layers
    return ArtefactData({"coords": frame}, {"explained": [float(v) for v in result.explained_variance_ratio],
                                            "adjacent_ratio": float(result.adjacent_ratio), "notes": _notes(a)})


def panels(ctx: ReportContext, target: str | None, full: bool) -> ArtefactData | NotApplicable:
    """fig:alpha_panels_{raw,deviation}_{selected,full}: per-layer grids on shared colour scales."""
    a = _alpha(ctx, target)
    if isinstance(a, NotApplicable):
        return a
    n_layers = a.alpha.shape[0]
    rows_sel = range(n_layers) if full else sorted({paper_layer(x, n_layers)
                                                    for x in alpha_analysis.PAPER_SELECTED_LAYERS})
    result = alpha_analysis.alpha_panels(a.alpha, rows_sel)
    k, rows, cols = result.raw.shape
    frame = pd.DataFrame({
        "layer": np.repeat(a.layers[list(result.layers)], rows * cols),
        "dim": np.tile(np.arange(rows * cols), k),
        "alpha": result.raw.reshape(-1),
        "deviation": result.deviation.reshape(-1),
    })
    return ArtefactData({"cells": frame}, {"rows": rows, "cols": cols, "raw_range": list(result.raw_range),
                                           "deviation_limit": float(result.deviation_limit), "notes": _notes(a)})


def specialisation(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
    """fig:alpha_specialisation_profile: percentiles of |alpha - alpha_init| per layer."""
    a = _alpha(ctx, target)
    if isinstance(a, NotApplicable):
        return a
    frame = alpha_analysis.specialisation_profile(a.alpha).table().copy()
    frame["layer"] = a.layers
    selected = sorted({int(a.layers[paper_layer(x, len(a.layers))]) for x in alpha_analysis.PAPER_SELECTED_LAYERS})
    return ArtefactData({"profile": frame}, {"selected": selected, "notes": _notes(a)})


# ---------------------------------------------------------------------------------------------- training
def _train_log(folder: Path) -> pd.DataFrame:
    log = pd.read_csv(folder / "train_log.csv")
    missing = [c for c in ("step", "train_loss") if c not in log.columns]
    if missing:
        raise UsageError(f"{folder / 'train_log.csv'} lacks columns {missing}; pass a training output folder")
    if "val_loss" not in log.columns:
        log["val_loss"] = np.nan
    return log[list(LOSS_COLUMNS)]


def losses(ctx: ReportContext, target: str | None, which: str) -> ArtefactData | NotApplicable:
    """Training and validation loss of the SST and/or the baseline (``which``: "both", "sst", "baseline")."""
    logs = ctx.inputs.training
    label = {"both": "fig:sst_vs_baseline_loss", "sst": "fig:sst_loss_standalone",
             "baseline": "fig:baseline_loss_standalone"}[which]
    wanted = {"both": ("sst", "baseline"), "sst": ("sst",), "baseline": ("baseline",)}[which]
    if not logs.given:
        return NotApplicable("no --training-log given", label)
    missing = [w for w in wanted if getattr(logs, w) is None]
    if missing:
        return NotApplicable(f"no {' or '.join(missing)} training log given (--training-log)", label)
    tables = {w: _train_log(getattr(logs, w)) for w in wanted}
    return ArtefactData(tables, {"series": list(wanted), "notes": [f"{w}: {getattr(logs, w)}" for w in wanted]})


def alpha_over_training(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
    """fig:alpha_global_stats_over_training from the SST's alpha_log.csv."""
    label = "fig:alpha_global_stats_over_training"
    folder = ctx.inputs.training.sst
    if folder is None:
        return NotApplicable("no SST training log given (--training-log of an SST training run)", label)
    if not (folder / "alpha_log.csv").is_file():
        return NotApplicable(f"{folder} has no alpha_log.csv", label)
    result = alpha_analysis.global_stats_over_training(pd.read_csv(folder / "alpha_log.csv"))
    if isinstance(result, NotApplicable):
        return result
    return ArtefactData({"stats": result.table()}, {"alpha_init": alpha_analysis.alpha_init(),
                                                    "notes": [f"alpha log: {folder / 'alpha_log.csv'}"]})


def _alpha_spec(name: str, caption: str, compute, draw) -> ArtefactSpec:  # noqa: ANN001 - internal table builder
    return ArtefactSpec(name, "figure", name.replace("_", ":", 1), FAMILY, caption, "checkpoint", ("checkpoint",),
                        compute, draw)


def _training_spec(name: str, caption: str, compute, draw) -> ArtefactSpec:  # noqa: ANN001
    return ArtefactSpec(name, "figure", name.replace("_", ":", 1), FAMILY, caption, "training", ("training",),
                        compute, draw)


SPECS: list[ArtefactSpec] = [
    _alpha_spec("fig_alpha_quantile_ribbon",
                "Within-layer percentile bands (p5-p95, p25-p75, median) of the learned blend coefficients, with "
                "alpha_init.", ribbon, fig_alpha.draw_ribbon),
    _alpha_spec("fig_alpha_pca_trajectory",
                "Each layer's deviation from alpha_init on the top principal components, coloured by layer and "
                "joined in depth order.", pca, fig_alpha.draw_pca),
    _alpha_spec("fig_alpha_panels_raw_selected",
                "Raw alpha of four representative layers reshaped to a grid, on a shared p1-p99 colour scale.",
                lambda c, t: panels(c, t, False), fig_alpha.draw_panels_raw),
    _alpha_spec("fig_alpha_panels_deviation_selected",
                "Deviation alpha - alpha_init of the same four layers on a shared diverging scale (red above, blue "
                "below).", lambda c, t: panels(c, t, False), fig_alpha.draw_panels_deviation),
    _alpha_spec("fig_alpha_specialisation_profile",
                "Within-layer percentiles of |alpha - alpha_init| across depth; the selected layers are marked.",
                specialisation, fig_alpha.draw_specialisation),
    _alpha_spec("fig_alpha_panels_raw_full", "Raw alpha of every layer on a shared colour scale.",
                lambda c, t: panels(c, t, True), fig_alpha.draw_panels_raw),
    _alpha_spec("fig_alpha_panels_deviation_full", "Deviation from alpha_init of every layer on a shared scale.",
                lambda c, t: panels(c, t, True), fig_alpha.draw_panels_deviation),
    _training_spec("fig_sst_vs_baseline_loss",
                   "Training loss (raw, light; moving average, solid) and validation loss of the SST and the matched "
                   "baseline.", lambda c, t: losses(c, t, "both"), fig_alpha.draw_losses),
    _training_spec("fig_sst_loss_standalone", "SST training and validation loss.",
                   lambda c, t: losses(c, t, "sst"), fig_alpha.draw_losses),
    _training_spec("fig_baseline_loss_standalone", "Matched baseline training and validation loss.",
                   lambda c, t: losses(c, t, "baseline"), fig_alpha.draw_losses),
    _training_spec("fig_alpha_global_stats_over_training",
                   "Whole-model blend coefficient statistics (mean +- std, min, max) per training step.",
                   alpha_over_training, fig_alpha.draw_alpha_training),
]
