"""The artefact data classes: what one table or figure is, and what computing it yields (a leaf module).

An :class:`ArtefactSpec` is one table or figure of the paper (named after its label: ``tab:main_results`` ->
``tab_main_results``). Its ``compute`` turns the report's inputs into :class:`ArtefactData` (named DataFrames plus
JSON-able notes) or a :class:`~sst_interp.kernels.results.NotApplicable` saying why the inputs cannot support it;
a figure's ``draw`` turns that data into a matplotlib ``Figure``. Only :class:`ArtefactData` is cached, so redrawing
a figure never reruns an analysis. Which specs exist, and binding them to runs, is
:mod:`sst_interp.reporting.registry`; the ``specs_*`` modules import this one, never the registry.

Scopes: ``report`` artefacts combine every run (one table across benchmarks); ``run`` artefacts are made once per
SST run (suffixed ``-<run name>`` when there are several); ``checkpoint`` artefacts once per distinct SST
checkpoint; ``training`` artefacts from the training logs; ``comparison`` artefacts once, from every run, training
log and published CSV together (ablations, hyperparameters, loss comparisons, external comparisons).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from sst_interp.analyses.sections import SECTIONS
from sst_interp.kernels.results import NotApplicable

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from sst_interp.reporting.context import ReportContext

Kind = Literal["table", "figure"]
Scope = Literal["report", "run", "checkpoint", "training", "comparison"]

#: Page sections, in display order: the named sections of :mod:`sst_interp.analyses.sections`, which every entry and
#: spec names by constant.
FAMILIES: tuple[str, ...] = SECTIONS


@dataclass
class ArtefactData:
    """What an artefact computes.

    Args:
        tables: name -> DataFrame. ``"main"`` is the table a table artefact shows and writes; figures read the
            frames their panels need.
        meta: JSON-able values: ``notes`` (list of one-line strings shown under a table) and whatever numbers a
            figure annotates.
    """

    tables: dict[str, pd.DataFrame]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def notes(self) -> list[str]:
        """One-line notes shown under the table."""
        return [str(n) for n in self.meta.get("notes", [])]


@dataclass(frozen=True)
class ArtefactSpec:
    """One table or figure the report knows how to make.

    Args:
        name: base file name, the paper label with ``:`` -> ``_`` (``tab_main_results``).
        kind: "table" or "figure".
        label: the paper label it reproduces (``tab:main_results``), or "" for measurements without one.
        family: page section (one of :data:`FAMILIES`).
        caption: one line on what the artefact shows.
        scope: "report", "run", "checkpoint", "training" or "comparison" (module docstring).
        needs: inputs whose content keys the cache: any of "run", "runs", "baseline", "probe", "dictionary",
            "checkpoint", "training", "experiments", "external".
        compute: ``(context, target) -> ArtefactData | NotApplicable``; ``target`` is the run name, the checkpoint
            path or None.
        draw: figures only: ``ArtefactData -> Figure``.
    """

    name: str
    kind: Kind
    label: str
    family: str
    caption: str
    scope: Scope
    needs: tuple[str, ...]
    compute: Callable[[ReportContext, str | None], ArtefactData | NotApplicable]
    draw: Callable[[ArtefactData], Figure] | None = None

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"{self.name}: unknown family {self.family!r}")
        if (self.kind == "figure") != (self.draw is not None):
            raise ValueError(f"{self.name}: figures need draw, tables must not have one")


@dataclass(frozen=True)
class Artefact:
    """One artefact to produce: a spec bound to its target.

    Args:
        spec: what to make.
        name: output name (``spec.name`` plus ``-<target>`` when the scope has several targets).
        target: run name, checkpoint path or None.
    """

    spec: ArtefactSpec
    name: str
    target: str | None

    @property
    def label(self) -> str:
        """The LaTeX label (paper label plus the target suffix)."""
        base = self.spec.label or self.spec.name.replace("_", ":", 1)
        return base + self.name[len(self.spec.name):]
