"""Intervention experiments (``python -m sst_interp.intervene``) in the report, from ``report --experiment DIR``.

Each artefact stacks the catalogue entry of its name (declared in :mod:`sst_interp.experiments.measurements`: the
tidy tables the experiment wrote, checked against the sha256 its manifest records) over the folders given, with an
``experiment`` column naming the folder; it is skipped, saying why, when no folder holds its experiment.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from sst_interp.analyses import sections
from sst_interp.catalogue import lookup
from sst_interp.kernels.results import NotApplicable
from sst_interp.reporting import fig_interventions
from sst_interp.reporting.artefacts import ArtefactData, ArtefactSpec
from sst_interp.reporting.context import ReportContext

NEEDS = ("experiments",)


def _stacked(key: str) -> Callable[[ReportContext, str | None], ArtefactData | NotApplicable]:
    """The catalogue entry ``key`` of every ``--experiment`` folder that holds its experiment, stacked with an
    ``experiment`` column naming the folder (each frame of a figure's data likewise)."""
    measurement = lookup(key)

    def compute(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
        results, reasons = [], []
        for folder in ctx.inputs.experiments:
            result = ctx.experiment_analysis(folder).attempt(key)
            if isinstance(result, NotApplicable):
                reasons.append(result.reason)
            else:
                results.append((Path(folder).name, result))
        if not results:
            return NotApplicable("; ".join(reasons) or "no --experiment folder given (python -m sst_interp.intervene "
                                 "... --out DIR, then report --experiment DIR)", measurement.artefact)
        if measurement.kind == "figure":
            tables = {name: _with_experiment([(folder, r.tables[name]) for folder, r in results])
                      for name in results[0][1].tables}
            return ArtefactData(tables, {"notes": [n for _, r in results for n in r.meta.get("notes", [])]})
        frame = _with_experiment([(folder, r.table()) for folder, r in results])
        notes = [n for _, r in results for n in r.notes[:-1]] + [results[0][1].notes[-1]]
        return ArtefactData({"main": frame}, {"notes": notes})

    compute.__doc__ = f"{measurement.artefact}: {measurement.title} (every --experiment folder, stacked)"
    return compute


def _with_experiment(frames: list[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    stacked = pd.concat([frame.assign(experiment=folder) for folder, frame in frames], ignore_index=True)
    return stacked[["experiment", *[c for c in stacked.columns if c != "experiment"]]]


SPECS = [
    ArtefactSpec("tab_intervention_window", "table", "", sections.INTERVENTIONS,
                 "Where the depth gain lives: iterations 2..k denied the state stream in windows of layers (mode "
                 "freeze or zero), beside the mean and resample baselines (the clean run's mean state, another "
                 "question's state); accuracy and first-token log-prob change against clean depth k, with 95% CIs "
                 "over questions (exact for the accuracy change and flip rate; for the log-prob change the median "
                 "with its exact sign-test interval, the mean without one).",
                 "report", NEEDS, _stacked("tab_intervention_window")),
    ArtefactSpec("tab_intervention_trace", "table", "", sections.INTERVENTIONS,
                 "Causal tracing across depths: mean indirect effect of patching depth k's last-iteration layer "
                 "output into depth 1 on the log-prob of depth k's first differing token, per (layer, offset from "
                 "that token), with n, SE, the total effect and the Holm-adjusted sign test; the resampled rows patch "
                 "another question's states (the control).",
                 "report", NEEDS, _stacked("tab_intervention_trace")),
    ArtefactSpec("fig_intervention_trace_heatmap", "figure", "", sections.INTERVENTIONS,
                 "Causal tracing heatmaps: layer x offset from the target (own states; another question's, the "
                 "control), and layer x depth-k iteration at position 0.",
                 "report", NEEDS, _stacked("fig_intervention_trace_heatmap"), fig_interventions.draw_trace),
    ArtefactSpec("tab_intervention_steer", "table", "", sections.INTERVENTIONS,
                 "Steering the halt: the halting probe's direction added at its layer (iterations 2..k) with a "
                 "scale sweep; overthinking (regressions) and recoveries against clean depth 1, flips against clean "
                 "depth k.", "report", NEEDS,
                 _stacked("tab_intervention_steer")),
    ArtefactSpec("tab_intervention_attribution", "table", "", sections.INTERVENTIONS,
                 "Attribution patching: trace's patch (depth k's layer output into depth 1) estimated to first "
                 "order at every layer x position x iteration from one gradient; the top cells beside their real "
                 "patching effect.", "report", NEEDS, _stacked("tab_intervention_attribution")),
]
