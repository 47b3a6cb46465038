"""Across families: the same measurement from runs of different latent-iteration families, side by side, one
figure per measurement (docs/families.md). Each is report-scoped: one artefact over every run of the report."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from sst_interp.analyses import sections
from sst_interp.analyses.families import capacity_profile, state_profile
from sst_interp.kernels.results import NotApplicable
from sst_interp.reporting import fig_families
from sst_interp.reporting.artefacts import ArtefactData, ArtefactSpec
from sst_interp.reporting.context import ReportContext


def _stacked(measure: Callable[[Any, str], pd.DataFrame | NotApplicable], label: str) -> Callable[
        [ReportContext, str | None], ArtefactData | NotApplicable]:
    """A compute that runs ``measure`` on every run and stacks the tables; the runs it does not apply to are named
    under the figure with their reason."""

    def compute(ctx: ReportContext, target: str | None) -> ArtefactData | NotApplicable:
        tables, notes = [], []
        for item in ctx.inputs.runs:
            result = measure(item.run, item.name)
            if isinstance(result, NotApplicable):
                notes.append(f"{item.name}: {result.reason}")
            else:
                tables.append(result)
        if not tables:
            return NotApplicable("; ".join(notes) or "no run", label)
        return ArtefactData({"main": pd.concat(tables, ignore_index=True)}, {"notes": notes})

    return compute


def _state(run: Any, name: str) -> pd.DataFrame | NotApplicable:
    return state_profile(run, name)


def _capacity(run: Any, name: str) -> pd.DataFrame | NotApplicable:
    return capacity_profile(run, name)


SPECS: list[ArtefactSpec] = [
    ArtefactSpec("fig_family_state", "figure", "", sections.ACROSS_FAMILIES,
                 "The carried loop state across iterations, every run of the report side by side: its top-k |value| "
                 "overlap and relative L2 change between consecutive iterations (SST: the last stateful layer; "
                 "HRM-Text: z_H; Inkling-2 Loop: the looped block's output), deepest depth, full positions.",
                 "report", ("runs",), _stacked(_state, "fig_family_state"), fig_families.draw_state),
    ArtefactSpec("fig_family_capacity", "figure", "", sections.ACROSS_FAMILIES,
                 "Accuracy and staged capacity per depth (the family's loop count), every run of the report side by "
                 "side.",
                 "report", ("runs",), _stacked(_capacity, "fig_family_capacity"), fig_families.draw_capacity),
]
