"""The data behind the figures of a checkpoint and of training logs (sec:learned_alpha, app:alpha_analysis,
app:training_curves): learned blend coefficients read from an SST checkpoint, and loss / alpha curves read from
training output folders.

Each function takes a :class:`~sst_interp.study.CheckpointAnalysis` or
:class:`~sst_interp.study.TrainingAnalysis` and returns :class:`~sst_interp.analyses.figure_data.FigureData`
(or a NotApplicable saying why); their entries (:data:`MEASUREMENTS`) are declared below and the report draws
them (:mod:`sst_interp.reporting.fig_alpha`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.analyses import alpha as alpha_analysis
from sst_interp.analyses import sections, tidy
from sst_interp.analyses.figure_data import FigureData
from sst_interp.analyses.layers import paper_layer
from sst_interp.analyses.measurement import Measurement, figure_main
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.paper import A_MAX, A_MIN, THETA_INIT, alpha_from_theta, alpha_init
from sst_interp.kernels.results import NotApplicable

LOSS_COLUMNS = ("step", "train_loss", "val_loss")


@dataclass(frozen=True)
class AlphaMatrix:
    """Learned blend coefficients of a checkpoint.

    Args:
        alpha: ``[L, d]`` float64 coefficients, one row per state-stream layer.
        layers: ``[L]`` the decoder layer of each row.
        source: the checkpoint folder.
        alpha_init: the coefficient every dimension started from.
    """

    alpha: np.ndarray
    layers: np.ndarray
    source: str
    alpha_init: float


def read_alpha(folder: Path) -> AlphaMatrix:
    """eq:alpha (:func:`sst_interp.kernels.paper.alpha_from_theta`) for every layer of a checkpoint folder (read from its
    safetensors; no model is built)."""
    from safetensors.numpy import load_file

    from sst_interp.model.checkpoint import STATE_FILE, read_checkpoint_config

    meta = read_checkpoint_config(folder)
    sst = meta["sst"]
    a_min, a_max = float(sst.get("a_min", A_MIN)), float(sst.get("a_max", A_MAX))
    theta_init = float(sst.get("theta_init", THETA_INIT))
    tensors = load_file(str(folder / STATE_FILE))
    layers = sorted(int(k.split(".")[1]) for k in tensors if k.endswith(".theta"))
    if not layers:
        raise UsageError(f"{folder / STATE_FILE} holds no layers.*.theta tensors; it is not an SST checkpoint")
    theta = np.stack([np.asarray(tensors[f"layers.{i}.theta"], dtype=np.float64) for i in layers])
    alpha = alpha_from_theta(theta, a_min, a_max)
    return AlphaMatrix(alpha, np.asarray(layers, dtype=np.int64), str(folder), alpha_init(theta_init, a_min, a_max))


def _notes(a: AlphaMatrix) -> list[str]:
    notes = [f"checkpoint {a.source}: {a.alpha.shape[0]} layers x {a.alpha.shape[1]} dimensions; alpha_init = "
             f"{a.alpha_init:.5f}"]
    if not np.isclose(a.alpha_init, alpha_analysis.alpha_init()):
        notes.append(f"this checkpoint's alpha_init differs from the paper's {alpha_analysis.alpha_init():.5f}; "
                     "deviations are measured from the paper's")
    return notes


# ------------------------------------------------------------------------------------------------ checkpoint
def ribbon(c: Any) -> FigureData:
    """fig:alpha_quantile_ribbon: within-layer percentiles."""
    a = c.alpha_matrix()
    frame = alpha_analysis.quantile_ribbon(a.alpha).table().copy()
    frame["layer"] = a.layers
    return FigureData({"ribbon": frame}, {"alpha_init": a.alpha_init, "notes": _notes(a)})


def pca(c: Any) -> FigureData | NotApplicable:
    """fig:alpha_pca_trajectory: per-layer deviations on their top principal components."""
    a = c.alpha_matrix()
    result = alpha_analysis.alpha_pca(a.alpha, init=a.alpha_init)
    if isinstance(result, NotApplicable):
        return result
    frame = result.table().copy()
    frame["layer"] = a.layers
    return FigureData({"coords": frame}, {"explained": [float(v) for v in result.explained_variance_ratio],
                                          "adjacent_ratio": float(result.adjacent_ratio), "notes": _notes(a)})


def panels(c: Any, full: bool) -> FigureData:
    """fig:alpha_panels_{raw,deviation}_{selected,full}: per-layer grids on shared colour scales (the raw and the
    deviation figure of a layer set share one computation)."""
    def build() -> FigureData:
        a = c.alpha_matrix()
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
        return FigureData({"cells": frame}, {"rows": rows, "cols": cols, "raw_range": list(result.raw_range),
                                             "deviation_limit": float(result.deviation_limit), "notes": _notes(a)})

    return c.memo(f"alpha:panels:{'full' if full else 'selected'}", build)


def specialisation(c: Any) -> FigureData:
    """fig:alpha_specialisation_profile: percentiles of |alpha - alpha_init| per layer."""
    a = c.alpha_matrix()
    frame = alpha_analysis.specialisation_profile(a.alpha).table().copy()
    frame["layer"] = a.layers
    selected = sorted({int(a.layers[paper_layer(x, len(a.layers))]) for x in alpha_analysis.PAPER_SELECTED_LAYERS})
    return FigureData({"profile": frame}, {"selected": selected, "notes": _notes(a)})


# ------------------------------------------------------------------------------------------------ training
def train_log(folder: Path) -> pd.DataFrame:
    """``step, train_loss, val_loss`` of a training output folder's ``train_log.csv`` (``val_loss`` NaN where the
    log has none)."""
    log = pd.read_csv(folder / "train_log.csv")
    missing = [c for c in ("step", "train_loss") if c not in log.columns]
    if missing:
        raise UsageError(f"{folder / 'train_log.csv'} lacks columns {missing}; pass a training output folder")
    if "val_loss" not in log.columns:
        log["val_loss"] = np.nan
    return log[list(LOSS_COLUMNS)]


def losses(t: Any, which: str) -> FigureData:
    """Training and validation loss of the SST and/or the baseline (``which``: "both", "sst", "baseline")."""
    wanted = {"both": ("sst", "baseline"), "sst": ("sst",), "baseline": ("baseline",)}[which]
    tables = {w: train_log(getattr(t, w)) for w in wanted}
    return FigureData(tables, {"series": list(wanted), "notes": [f"{w}: {getattr(t, w)}" for w in wanted]})


def alpha_over_training(t: Any) -> FigureData | NotApplicable:
    """fig:alpha_global_stats_over_training from the SST's alpha_log.csv."""
    folder = t.sst
    if not (folder / "alpha_log.csv").is_file():
        return NotApplicable(f"{folder} has no alpha_log.csv", "fig:alpha_global_stats_over_training")
    result = alpha_analysis.global_stats_over_training(pd.read_csv(folder / "alpha_log.csv"))
    if isinstance(result, NotApplicable):
        return result
    return FigureData({"stats": result.table()}, {"alpha_init": alpha_analysis.alpha_init(),
                                                  "notes": [f"alpha log: {folder / 'alpha_log.csv'}"]})


def loss_frame(result: FigureData) -> pd.DataFrame:
    """The loss curves of a losses figure as one long frame: ``model, step, train_loss, val_loss``."""
    frames = [frame.assign(model=name) for name, frame in result.tables.items()]
    long = pd.concat(frames, ignore_index=True)
    return long[["model", *LOSS_COLUMNS]]


# ------------------------------------------------------------------------------------------------ entries
# sec:learned_alpha, app:alpha_analysis, app:training_curves.
RIBBON_DOC = {"layer": "decoder layer", "mean": "mean alpha over the layer's dimensions",
              **{f"p{q}": f"{q}th percentile of the layer's alpha" for q in (5, 25, 50, 75, 95)}}
PCA_DOC = {"layer": "decoder layer", **{f"pc{i}": f"the layer's deviation from alpha_init on principal component {i}"
                                        for i in (1, 2, 3)}}
PANELS_DOC = {"layer": "decoder layer", "dim": "hidden dimension (row-major on the grid)", "alpha": "the learned "
              "blend coefficient", "deviation": "alpha - alpha_init"}
SPECIALISATION_DOC = {"layer": "decoder layer",
                      **{f"p{q}": f"{q}th percentile of |alpha - alpha_init| in the layer"
                         for q in (25, 50, 75, 90, 95, 99)}}
LOSS_DOC = {"model": "sst or baseline", "step": "optimiser step", "train_loss": "training loss (nats per token)",
            "val_loss": "validation loss (nats per token), NaN between validations"}
ALPHA_TRAINING_DOC = {"step": "optimiser step", "mean": "mean alpha over every layer and dimension",
                      "std": "its standard deviation", "min": "smallest alpha", "max": "largest alpha",
                      "layers": "layers logged at the step"}


def _losses_tidy(result: Any) -> pd.DataFrame:
    return tidy.renamed(loss_frame(result), {})


MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(name="alpha_quantile_ribbon", label="fig:alpha_quantile_ribbon", title="Within-layer percentile bands "
                "of the learned blend coefficients.", requires=("checkpoint",), compute=ribbon, tidy=figure_main,
                columns=RIBBON_DOC, kind="figure", scope="checkpoint", family=sections.ALPHA_AND_TRAINING,
                figure="alpha_ribbon", caption="Within-layer percentile bands (p5-p95, p25-p75, median) of the learned "
                "blend coefficients, with alpha_init."),
    Measurement(name="alpha_pca_trajectory", label="fig:alpha_pca_trajectory", title="Each layer's deviation from "
                "alpha_init on the top principal components.", requires=("checkpoint",), compute=pca, tidy=figure_main,
                columns=PCA_DOC, kind="figure", scope="checkpoint", family=sections.ALPHA_AND_TRAINING,
                figure="alpha_pca", caption="Each layer's deviation from alpha_init on the top principal components, "
                "coloured by layer and joined in depth order."),
    Measurement(name="alpha_panels_raw_selected", label="fig:alpha_panels_raw_selected", title="Raw alpha of four "
                "representative layers on a grid.", requires=("checkpoint",), compute=lambda c: panels(c, False),
                tidy=figure_main, columns=PANELS_DOC, kind="figure", scope="checkpoint",
                family=sections.ALPHA_AND_TRAINING, figure="alpha_panels_raw", caption="Raw alpha of four "
                "representative layers reshaped to a grid, on a shared p1-p99 colour scale."),
    Measurement(name="alpha_panels_deviation_selected", label="fig:alpha_panels_deviation_selected", title="Deviation "
                "from alpha_init of the same four layers.", requires=("checkpoint",),
                compute=lambda c: panels(c, False), tidy=figure_main, columns=PANELS_DOC, kind="figure",
                scope="checkpoint", family=sections.ALPHA_AND_TRAINING, figure="alpha_panels_deviation",
                caption="Deviation alpha - alpha_init of the same four layers on a shared diverging scale (red above, "
                "blue below)."),
    Measurement(name="alpha_specialisation_profile", label="fig:alpha_specialisation_profile", title="Within-layer "
                "percentiles of |alpha - alpha_init| across depth.", requires=("checkpoint",), compute=specialisation,
                tidy=figure_main, columns=SPECIALISATION_DOC, kind="figure", scope="checkpoint",
                family=sections.ALPHA_AND_TRAINING, figure="alpha_specialisation", caption="Within-layer percentiles "
                "of |alpha - alpha_init| across depth; the selected layers are marked."),
    Measurement(name="alpha_panels_raw_full", label="fig:alpha_panels_raw_full", title="Raw alpha of every layer.",
                requires=("checkpoint",), compute=lambda c: panels(c, True), tidy=figure_main, columns=PANELS_DOC,
                kind="figure", scope="checkpoint", family=sections.ALPHA_AND_TRAINING, figure="alpha_panels_raw",
                caption="Raw alpha of every layer on a shared colour scale."),
    Measurement(name="alpha_panels_deviation_full", label="fig:alpha_panels_deviation_full", title="Deviation from "
                "alpha_init of every layer.", requires=("checkpoint",), compute=lambda c: panels(c, True),
                tidy=figure_main, columns=PANELS_DOC, kind="figure", scope="checkpoint",
                family=sections.ALPHA_AND_TRAINING, figure="alpha_panels_deviation", caption="Deviation from "
                "alpha_init of every layer on a shared scale."),
    Measurement(name="sst_vs_baseline_loss", label="fig:sst_vs_baseline_loss", title="Training and validation loss of "
                "the SST and the matched baseline.", requires=("sst_log", "baseline_log"),
                compute=lambda t: losses(t, "both"), tidy=_losses_tidy, columns=LOSS_DOC, kind="figure",
                scope="training", family=sections.ALPHA_AND_TRAINING, figure="losses", caption="Training loss (raw, "
                "light; moving average, solid) and validation loss of the SST and the matched baseline."),
    Measurement(name="sst_loss_standalone", label="fig:sst_loss_standalone", title="SST training and validation loss.",
                requires=("sst_log",), compute=lambda t: losses(t, "sst"), tidy=_losses_tidy, columns=LOSS_DOC,
                kind="figure", scope="training", family=sections.ALPHA_AND_TRAINING, figure="losses", caption="SST "
                "training and validation loss."),
    Measurement(name="baseline_loss_standalone", label="fig:baseline_loss_standalone", title="Matched baseline "
                "training and validation loss.", requires=("baseline_log",), compute=lambda t: losses(t, "baseline"),
                tidy=_losses_tidy, columns=LOSS_DOC, kind="figure", scope="training",
                family=sections.ALPHA_AND_TRAINING, figure="losses", caption="Matched baseline training and validation "
                "loss."),
    Measurement(name="alpha_global_stats_over_training", label="fig:alpha_global_stats_over_training",
                title="Whole-model blend coefficient statistics per training step.", requires=("sst_log",),
                compute=alpha_over_training, tidy=figure_main, columns=ALPHA_TRAINING_DOC, kind="figure",
                scope="training", family=sections.ALPHA_AND_TRAINING, figure="alpha_training", caption="Whole-model "
                "blend coefficient statistics (mean +- std, min, max) per training step."),
)
