"""Evaluation artefacts (paper sec:evaluation) that stack every run of the report: the headline, staged capacity and
repetition, one table per report (the per-run measurements, overthinking and its flows among them, come from the
catalogue)."""

from __future__ import annotations

import pandas as pd

from sst_interp.analyses import sections
from sst_interp.analyses.availability import NotAvailable
from sst_interp.kernels.results import NotApplicable
from sst_interp.reporting.artefacts import ArtefactData, ArtefactSpec
from sst_interp.reporting.context import ReportContext


def _baseline_depth(base: object) -> int:
    return int(min(base.run.depths))  # type: ignore[attr-defined]


def main_results(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
    """tab:main_results for every run with a matched baseline (one row per benchmark): the catalogue entry of each
    run, stacked."""
    frames, notes = [], []
    for item in ctx.inputs.runs:
        base = ctx.inputs.baselines.get(item.name)
        if base is None:
            continue
        result = ctx.analysis(item.name).attempt("tab:main_results")
        if isinstance(result, NotApplicable):
            notes.append(f"{item.benchmark}: {result.reason}")
            continue
        frames.append(result.table())
        depths = ", ".join(map(str, item.run.depths))
        notes.append(f"{item.benchmark}: SST run {item.path} (staged compute over depths {depths}) vs baseline "
                     f"{base.path} at depth {_baseline_depth(base)}")
    if not frames:
        reason = "; ".join(notes) if notes else ("no --baseline run given (the headline compares the SST with its "
                                                 "matched fine-tuned baseline)")
        return NotApplicable(reason, "tab:main_results")
    return ArtefactData({"main": pd.concat(frames, ignore_index=True)}, {"notes": notes})


def staged_breakdown(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
    """tab:staged_breakdown over every multi-depth run: the catalogue entry of each run, stacked."""
    frames = [ctx.analysis(item.name).table("tab:staged_breakdown") for item in ctx.inputs.runs
              if len(item.run.depths) >= 2]
    if not frames:
        depths = ", ".join(f"{i.name}: {i.run.depths}" for i in ctx.inputs.runs)
        return NotApplicable(f"every run has a single depth ({depths}); staged compute needs two or more",
                             "tab:staged_breakdown")
    return ArtefactData({"main": pd.concat(frames, ignore_index=True)}, {"notes": []})


def repetition(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
    """tab:repetition: per benchmark, :meth:`RunAnalysis.repetition` (SST staged / flat shallowest / flat deepest
    and the baseline)."""
    frames, notes = [], []
    for item in ctx.inputs.runs:
        try:
            frame = ctx.analysis(item.name).table("tab:repetition")
        except NotAvailable as why:
            notes.append(f"{item.benchmark}: {why}")
            continue
        reference = str(frame["configuration"].iloc[0])
        frame.insert(0, "benchmark", item.benchmark)
        frames.append(frame)
        notes.append(f"{item.benchmark}: Mann-Whitney p compares each configuration with {reference}")
    if not frames:
        return NotApplicable("; ".join(notes), "tab:repetition")
    if not ctx.inputs.baselines:
        notes.append("no --baseline run given: baseline rows are omitted")
    return ArtefactData({"main": pd.concat(frames, ignore_index=True)}, {"notes": notes})


SPECS: list[ArtefactSpec] = [
    ArtefactSpec("tab_main_results", "table", "tab:main_results", sections.EVALUATION,
                 "Headline comparison: matched baseline vs SST at staged compute, the difference in points and the "
                 "error correction (SST - baseline) / (1 - baseline), per benchmark.",
                 "report", ("runs", "baseline"), main_results),
    ArtefactSpec("tab_staged_breakdown", "table", "tab:staged_breakdown", sections.EVALUATION,
                 "Staged compute capacity: fraction of questions solved at some depth up to each stage, per "
                 "benchmark.", "report", ("runs",), staged_breakdown),
    ArtefactSpec("tab_repetition", "table", "tab:repetition", sections.EVALUATION,
                 "Sentence-level repetition (sentences of >= 20 characters occurring more than once per turn) and "
                 "loops, per benchmark and configuration.", "report", ("runs", "baseline"), repetition),
]
