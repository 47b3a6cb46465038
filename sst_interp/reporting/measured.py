"""Report tables that are registry measurements: the report writes an entry's paper layout and notes.

:func:`measured_spec` turns an entry of :mod:`sst_interp.analyses.registry` into an
:class:`~sst_interp.reporting.artefacts.ArtefactSpec`: the measurement is computed by the run's
:class:`~sst_interp.analyses.RunAnalysis` (the one a notebook gets from ``analyses.open``), so the report and the
API cannot disagree. The spec adds only what belongs to the page: its section and caption.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sst_interp.analyses.registry import lookup
from sst_interp.kernels.results import NotApplicable
from sst_interp.reporting.artefacts import ArtefactData, ArtefactSpec
from sst_interp.reporting.context import ReportContext


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


def measured_spec(key: str, family: str, caption: str, inputs: tuple[str, ...] | None = None) -> ArtefactSpec:
    """A table artefact ``tab_<name>`` backed by the registry entry ``key``, of the entry's scope (a run, or a
    ``comparison`` of several inputs); ``inputs`` key its cache (default: the scope's)."""
    measurement = lookup(key)
    scope = measurement.scope

    def compute(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
        return measured_data(ctx, target, key, scope)

    compute.__doc__ = f"{measurement.key}: {measurement.title}"
    return ArtefactSpec(measurement.artefact, "table", measurement.label, family, caption, scope,
                        inputs or SCOPE_INPUTS[scope], compute)


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


def measured_figure_spec(key: str, family: str, caption: str, draw: Callable[[ArtefactData], Any],
                         inputs: tuple[str, ...] | None = None) -> ArtefactSpec:
    """A figure artefact backed by the registry entry ``key`` (its FigureData's frames and numbers), drawn by
    ``draw``; run-, checkpoint- or training-scoped as the entry is."""
    measurement = lookup(key)
    scope = measurement.scope

    def compute(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
        result = analysis_for(ctx, scope, target).attempt(key)
        if isinstance(result, NotApplicable):
            return result
        return ArtefactData(dict(result.tables), dict(result.meta))

    compute.__doc__ = f"{measurement.key}: {measurement.title}"
    return ArtefactSpec(measurement.artefact, "figure", measurement.label, family, caption, scope,
                        inputs or SCOPE_INPUTS[scope], compute, draw)
