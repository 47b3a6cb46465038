"""Report artefacts that are catalogue measurements: the report writes an entry's paper layout and notes, or draws
its figure data.

:func:`measured_spec` turns a catalogue entry that has a caption into an
:class:`~sst_interp.reporting.artefacts.ArtefactSpec`: the measurement is computed by the run's
:class:`~sst_interp.study.RunAnalysis` (the one a notebook gets from ``study.open``), so the report and the
API cannot disagree. The entry itself says where it goes on the page (``family``, ``caption``) and how a figure is
drawn (``figure``, a style of :mod:`sst_interp.reporting.styles`); no spec is written by hand for it.
"""

from __future__ import annotations

from typing import Any

from sst_interp.analyses.measurement import Measurement
from sst_interp.catalogue import all_measurements, lookup
from sst_interp.kernels.results import NotApplicable
from sst_interp.reporting.artefacts import ArtefactData, ArtefactSpec
from sst_interp.reporting.context import ReportContext
from sst_interp.reporting.styles import drawer


def measured_data(ctx: ReportContext, target: str | None, key: str, scope: str = "run"
                  ) -> ArtefactData | NotApplicable:
    """The artefact data of measurement ``key`` on run ``target`` (or the analysis of another ``scope``): the paper
    layout as ``main``, the entry's extra tables beside it, its provenance notes."""
    measurement = lookup(key)
    analysis = analysis_for(ctx, scope, target)
    result = analysis.attempt(key)
    if isinstance(result, NotApplicable):
        return result
    frame, found = measurement.present(result)
    tables = {"main": frame, **measurement.extra_tables(result)}
    return ArtefactData(tables, {"notes": [*measurement.notes(analysis, result), *found]})


def measured_spec(measurement: Measurement) -> ArtefactSpec:
    """The artefact of a catalogue entry that has a caption: a table ``tab_<name>`` (the entry's paper layout and
    notes) or a figure ``fig_<name>`` (its FigureData, drawn by the entry's figure style), of the entry's scope,
    under its family, keyed in the cache by its ``inputs`` (default: the scope's)."""
    key, scope = measurement.key, measurement.scope
    inputs = measurement.inputs or SCOPE_INPUTS[scope]
    if measurement.kind == "figure":
        def compute(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
            result = analysis_for(ctx, scope, target).attempt(key)
            if isinstance(result, NotApplicable):
                return result
            return ArtefactData(dict(result.tables), dict(result.meta))

        draw = drawer(measurement.figure, measurement.artefact)
    else:
        def compute(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
            return measured_data(ctx, target, key, scope)

        draw = None
    compute.__doc__ = f"{measurement.key}: {measurement.title}"
    return ArtefactSpec(measurement.artefact, measurement.kind, measurement.label, measurement.family,
                        measurement.caption, scope, inputs, compute, draw)


def measured_specs() -> list[ArtefactSpec]:
    """The artefact of every catalogue entry with a caption, in catalogue order."""
    return [measured_spec(m) for m in all_measurements() if m.caption]


def analysis_for(ctx: ReportContext, scope: str, target: str | None) -> Any:
    """The analysis object a measurement of ``scope`` reads: the run's, the checkpoint's or the training logs'."""
    if scope == "checkpoint":
        return ctx.checkpoint_analysis(target)
    if scope == "training":
        return ctx.training_analysis()
    if scope == "comparison":
        return ctx.comparison_analysis()
    return ctx.analysis(target)


#: The report inputs each scope's artefacts read (their cache keys).
SCOPE_INPUTS = {"run": ("run",), "checkpoint": ("checkpoint",), "training": ("training",),
                "comparison": ("runs", "baseline", "training", "external")}
