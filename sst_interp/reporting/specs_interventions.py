"""Intervention experiments (``python -m sst_interp.intervene``) in the report, from ``report --experiment DIR``.

Each artefact reads the tidy tables its experiments wrote (checked against the sha256 their manifests record) and
stacks them with an ``experiment`` column naming the folder; an artefact is skipped, saying why, when no folder
given holds its experiment.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sst_interp.analyses.results import NotApplicable
from sst_interp.experiments.manifest import kinds_in, read_manifest, read_table
from sst_interp.reporting import fig_interventions
from sst_interp.reporting.artefacts import ArtefactData, ArtefactSpec
from sst_interp.reporting.context import ReportContext

FAMILY = "Interventions"
NEEDS = ("experiments",)


def _stacked(ctx: ReportContext, kind: str, table: str, name: str) -> tuple[pd.DataFrame, list[str]] | NotApplicable:
    folders = [p for p in ctx.inputs.experiments if kind in kinds_in(p)]
    if not folders:
        return NotApplicable(f"no --experiment folder holds a {kind} experiment (python -m sst_interp.intervene "
                             f"{kind} --out DIR, then report --experiment DIR)", name)
    frames, notes = [], []
    for folder in folders:
        frames.append(read_table(folder, kind, table).assign(experiment=Path(folder).name))
        manifest = read_manifest(folder, kind)
        record = manifest["record"]
        notes.append(f"{Path(folder).name}: {kind} {manifest['config']}; {record['questions']} "
                     f"({record['protocol']}), batch {record['batch_size']}, "
                     f"{len(manifest['conditions'])} condition run(s) under {Path(folder).name}/runs")
    frame = pd.concat(frames, ignore_index=True)
    return frame[["experiment", *[c for c in frame.columns if c != "experiment"]]], notes


def _table(kind: str, table: str, name: str, note: str):
    def compute(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
        found = _stacked(ctx, kind, table, name)
        if isinstance(found, NotApplicable):
            return found
        frame, notes = found
        return ArtefactData({"main": frame}, {"notes": [*notes, note]})

    compute.__doc__ = f"{name}: the {kind} experiment's {table} table"
    return compute


def trace_figure(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
    """fig_intervention_trace: both heatmaps of every trace experiment."""
    name = "fig_intervention_trace"
    positions = _stacked(ctx, "trace", "trace_layer_position", name)
    if isinstance(positions, NotApplicable):
        return positions
    iterations = _stacked(ctx, "trace", "trace_layer_iteration", name)
    assert not isinstance(iterations, NotApplicable)
    return ArtefactData({"layer_position": positions[0], "layer_iteration": iterations[0]},
                        {"notes": positions[1]})


SPECS = [
    ArtefactSpec("tab_intervention_window", "table", "", FAMILY,
                 "Where the depth gain lives: iterations 2..k denied the state stream in windows of layers; accuracy "
                 "and first-token log-prob change against clean depth k, with bootstrap CIs over questions.",
                 "report", NEEDS, _table("window", "window", "tab_intervention_window",
                                         "CIs: 95% percentile bootstrap over questions (scipy.stats.bootstrap, "
                                         "seeded); McNemar: exact, window vs clean depth k")),
    ArtefactSpec("tab_intervention_trace", "table", "", FAMILY,
                 "Causal tracing across depths: mean indirect effect of patching depth k's last-iteration layer "
                 "output into depth 1, per (layer, position), on the log-prob of depth k's first differing token.",
                 "report", NEEDS, _table("trace", "trace_layer_position", "tab_intervention_trace",
                                         "indirect effect = patched - depth-1 log-prob of the target token, tokens "
                                         "before the target forced to the shared ones")),
    ArtefactSpec("fig_intervention_trace", "figure", "", FAMILY,
                 "Causal tracing heatmaps: layer x position, and layer x depth-k iteration at position 0.",
                 "report", NEEDS, trace_figure, fig_interventions.draw_trace),
    ArtefactSpec("tab_intervention_steer", "table", "", FAMILY,
                 "Steering the halt: the halting probe's direction added at its layer (iterations 2..k) with a "
                 "scale sweep; overthinking (regressions) and recoveries against clean depth 1, flips against clean "
                 "depth k.", "report", NEEDS,
                 _table("steer", "steer", "tab_intervention_steer",
                        "scale in units of the state's mean norm at the probe's layer (position 0, clean depth k); "
                        "CIs: 95% percentile bootstrap over questions")),
]
