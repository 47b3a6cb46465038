"""Per-position depth policies (issue 23): accuracy against compute across the report's runs, where each rule stops
by regime, and its agreement with L2 convergence monitoring."""

from __future__ import annotations

import pandas as pd

from sst_interp.analyses import sections
from sst_interp.analyses.depth_pareto import ParetoResult, combine, mark_pareto, pareto
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.results import NotApplicable
from sst_interp.reporting import fig_depth
from sst_interp.reporting.artefacts import ArtefactData, ArtefactSpec
from sst_interp.reporting.context import ReportContext


def _stacked(ctx: ReportContext) -> ArtefactData | NotApplicable:
    """The catalogue's ``tab_depth_pareto`` of every run, in one table with the front recomputed over all rows."""

    results = [ctx.analysis(item.name).attempt("tab_depth_pareto") for item in ctx.inputs.runs]
    usable = [r for r in results if not isinstance(r, NotApplicable)]
    if not usable:
        return NotApplicable("; ".join(r.reason for r in results) or "no run", "tab_depth_pareto")
    # A single fixed depth compares with nothing alone, but beside other runs it is a reference point.
    usable += [pareto(item.run, item.path.name) for item, r in zip(ctx.inputs.runs, results)
               if isinstance(r, NotApplicable)]
    notes: list[str] = []
    if ctx.inputs.probe is not None:
        from sst_interp.probe.policy_sweep import probe_row

        for item in ctx.inputs.runs:
            try:
                row = probe_row(item.run, item.path.name, ctx.inputs.probe)
            except UsageError as why:  # a run without flat depths 1..k: the reason goes under the table
                notes.append(f"{item.name}: no per-turn probe row ({why})")
                continue
            usable.append(ParetoResult(mark_pareto(pd.DataFrame([row]))))
    merged = combine(usable)
    return ArtefactData({"main": merged.table()}, {"notes": [*merged.notes, *notes]})


def pareto_table(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
    """tab_depth_pareto over every run of the report (a fixed-depth run and the runs recorded under policies)."""
    return ctx.memo(("depth_pareto",), lambda: _stacked(ctx))


def pareto_figure(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
    """fig_depth_pareto_front: the same rows, drawn."""
    data = pareto_table(ctx, target)
    if isinstance(data, NotApplicable):
        return data
    return ArtefactData({"points": data.tables["main"]}, dict(data.meta))


SPECS: list[ArtefactSpec] = [
    ArtefactSpec("tab_depth_pareto", "table", "", sections.PER_POSITION_DEPTH,
                 "Accuracy against mean iterations per generated token, every run of the report: flat depths, "
                 "staged capacity (an oracle), per-position policies run live, and threshold sweeps simulated on a "
                 "fixed-depth run (accuracy bounds and an iteration estimate, never a point guess).",
                 "report", ("runs",), pareto_table),
    ArtefactSpec("fig_depth_pareto_front", "figure", "", sections.PER_POSITION_DEPTH,
                 "Accuracy against iterations per token: measured rows as points with their front, simulated rows "
                 "as accuracy bounds; right: the questions each simulated policy reproduces exactly.",
                 "report", ("runs",), pareto_figure, fig_depth.draw_pareto),
]
