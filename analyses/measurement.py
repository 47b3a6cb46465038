"""A measurement, declared once: the :class:`Measurement` entry and what the entries of every family share.

An entry says which paper table it reproduces (``label``), what an input must have for it (``requires``:
declarative, checked from the manifest without computing anything), how to compute it from an analysis object
(``compute``, which reuses the object's shared steps), how to turn the result into tidy data (``tidy``, documented
by ``columns``), which provenance notes go with it (``notes``), the paper's layout (``presentation``) and where the
report puts it (``family``, ``caption``, ``figure``). Each family module declares its entries next to its functions
(``MEASUREMENTS`` in :mod:`sst_interp.analyses.evaluation`, :mod:`~sst_interp.analyses.basins`, ...,
:mod:`sst_interp.probe.measurements`, :mod:`sst_interp.experiments.measurements`), and :mod:`sst_interp.catalogue`
gathers them all. Everything else is generated from these entries:

- the method of each entry on its analysis object (:class:`~sst_interp.study.RunAnalysis`, ...), with
  ``table()``, ``data()``, ``result()``, ``notes()`` and ``available()``;
- the report's artefact of each entry with a caption (:mod:`sst_interp.reporting.measured`), which writes
  ``presentation`` and ``notes`` of the same entry, or draws its figure data in the entry's figure style.

This module holds the run requirements every family shares (:data:`REQUIREMENTS`; a family adds its own in its
module's ``REQUIREMENTS``) and the helpers the entries share (tidy forms of paper tables, the basin step's parts,
computing to find out).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from sst_interp.analyses import tidy
from sst_interp.kernels.results import NotApplicable

# The functions below take the analysis objects of sst_interp.study (annotated Any: those sit above the catalogue,
# which gathers this module's entries).


# ------------------------------------------------------------------------------------------------ requirements
def _fixed_depth(a: Any) -> str | None:
    policy = str(a.run.manifest.get("depth_policy", "fixed"))
    if policy != "fixed" and not policy.startswith("probe:"):
        return (f"the run used the per-position depth policy {policy}, so its positions ran different numbers of "
                f"iterations; this measurement compares iterations at a fixed depth (record with --depth-policy "
                f"fixed)")
    return None


def _iterations(a: Any) -> str | None:
    # Comparing iterations needs every position to have run the same ones: a fixed (or per-turn) depth.
    unfixed = _fixed_depth(a)
    if unfixed is not None:
        return unfixed
    if max(a.run.depths, default=0) < 2:
        return f"run has depths {a.run.depths}; comparing iterations needs a depth >= 2"
    return None


def _depths(a: Any) -> str | None:
    if len(a.run.depths) < 2:
        return f"run has a single depth ({', '.join(map(str, a.run.depths))}); staged compute needs two or more"
    return None


def _baseline(a: Any) -> str | None:
    if a.baseline is None:
        return "compares the SST with its matched baseline: pass baseline="
    return None


def _codeact(a: Any) -> str | None:
    protocol = a.run.manifest.get("protocol", "completion")
    if protocol != "codeact":
        return f"the run was recorded with --protocol {protocol}; this needs codeact episodes"
    return None


def _probe(a: Any) -> str | None:
    # MUST HALT / SAFE labels compare each question's staged depth with the next flat depth (sec:halting_probe),
    # and the probe reads position 0's recorded hidden state at every iteration.
    unfixed = _fixed_depth(a)
    if unfixed is not None:
        return unfixed
    if len(a.run.depths) < 2:
        return (f"run has a single depth ({', '.join(map(str, a.run.depths))}); the halting labels compare "
                f"consecutive flat depths, so the probe needs two or more")
    if int(a.run.manifest.get("full_positions") or 0) < 1:
        return "the run recorded no hidden states (full_positions 0); the probe reads position 0's hidden state"
    return None


def _checkpoint(c: Any) -> str | None:
    return c.missing if c.checkpoint is None else None


def _training_log(which: str) -> Callable[[Any], str | None]:
    def check(t: Any) -> str | None:
        if t.sst is None and t.baseline is None:
            return "no --training-log given"
        if getattr(t, which) is None:
            return f"no {which} training log given (--training-log)"
        return None

    return check


def _comparison(a: Any) -> str | None:
    # Accuracy against compute needs two conditions: several flat depths, or a run recorded under a policy.
    if str(a.run.manifest.get("depth_policy", "fixed")) == "fixed" and len(a.run.depths) < 2:
        return (f"run has a single fixed depth ({', '.join(map(str, a.run.depths))}): nothing to compare its compute "
                f"with; record several depths, or report it beside runs recorded under --depth-policy")
    return None


#: Declarative requirements: name -> check (the reason it is unmet, or None). Each reads the manifest (or whether
#: an input was given) only.
REQUIREMENTS: dict[str, Callable[[Any], str | None]] = {
    "iterations": _iterations,
    "comparison": _comparison,
    "depths": _depths,
    "baseline": _baseline,
    "codeact": _codeact,
    "probe": _probe,
    "checkpoint": _checkpoint,
    "sst_log": _training_log("sst"),
    "baseline_log": _training_log("baseline"),
}


# ------------------------------------------------------------------------------------------------ the entry
def _no_notes(analysis: Any, result: Any) -> list[str]:
    return []


def paper_table(result: Any) -> pd.DataFrame:
    """The paper's layout of a result: its ``table()`` (an entry's default ``presentation``)."""
    return result.table()


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """One measurement of one run.

    Args:
        name: the RunAnalysis method and the report artefact (``tab_<name>``) it backs.
        label: the paper label it reproduces (``tab:overthinking``), or "" for a table of this project's own.
        title: one line saying what it measures.
        requires: names of requirements (:data:`REQUIREMENTS`, or a family's own); all must hold for the
            measurement to be available.
        compute: RunAnalysis -> an AnalysisResult (or a NotApplicable saying why this run cannot support it).
        tidy: result -> long-form DataFrame, one row per observation.
        columns: the tidy frame's columns -> what each holds (units in the name).
        notes: (analysis, result) -> provenance notes (where a threshold came from, what was left out).
        presentation: result -> the paper's layout (what the report writes).
        extra_tables: result -> further named tables the report writes beside the main one.
        kind: ``table``, or ``figure`` (the result is :class:`~sst_interp.analyses.figure_data.FigureData`: named
            frames and the numbers the figure annotates; ``tidy`` gives its main frame).
        found: analysis -> the reason the input cannot support it, or None: what ``available()`` checks after
            ``requires`` holds, for a condition the manifest cannot tell (enough MUST HALT questions, a basin
            shift at position 0). It may compute the analysis' shared steps (memoised, so ``data()`` reuses them)
            but not the measurement itself.
        per_question: (analysis, question, depth, turn) -> the result for that question, compared at that depth
            (``data(label, question=..., depth=...)``), for a figure that shows one question; None: ``data``
            selects the question's rows from the frame (when it has a ``question_id`` column).
        scope: what it measures: a ``run`` (:class:`~sst_interp.study.RunAnalysis`), a ``checkpoint``
            (:class:`~sst_interp.study.CheckpointAnalysis`), ``training`` logs
            (:class:`~sst_interp.study.TrainingAnalysis`) or an intervention ``experiment`` folder
            (:class:`~sst_interp.study.ExperimentAnalysis`); ``compute`` receives that object.
        family: the report's section it is written under (a constant of :mod:`sst_interp.analyses.sections`);
            with ``caption``, what puts it on the report's page (an entry without a caption is either not on the
            page or written by a hand-written, cross-run spec of the report).
        caption: the report's one-line caption of the artefact.
        figure: figures only: the name of the figure style that draws it (``sst_interp.reporting.styles`` maps each
            style to a drawer, so this package never imports matplotlib).
        inputs: the report inputs whose content keys its cache when they differ from the scope's own (a run's
            table that also reads the baseline: ``("run", "baseline")``).
    """

    name: str
    label: str
    title: str
    requires: tuple[str, ...]
    compute: Callable[[Any], Any]
    tidy: Callable[[Any], pd.DataFrame]
    columns: Mapping[str, str]
    notes: Callable[[Any, Any], list[str]] = _no_notes
    presentation: Callable[[Any], pd.DataFrame] = paper_table
    extra_tables: Callable[[Any], dict[str, pd.DataFrame]] = field(default=lambda result: {})
    kind: str = "table"
    scope: str = "run"
    found: Callable[[Any], str | None] | None = None
    per_question: Callable[..., Any] | None = None
    family: str = ""
    caption: str = ""
    figure: str = ""
    inputs: tuple[str, ...] = ()

    @property
    def artefact(self) -> str:
        """The report artefact it backs: :attr:`key` with ``:`` -> ``_`` (``fig_overlap_heatmap``, ``tab_gmm``)."""
        return self.key.replace(":", "_", 1)

    @property
    def key(self) -> str:
        """The canonical spelling: the paper label, or ``tab:<name>`` (``fig:<name>``) for a table (figure) of this
        project's own."""
        return self.label or f"{'fig' if self.kind == 'figure' else 'tab'}:{self.name}"

    def present(self, result: Any) -> tuple[pd.DataFrame, list[str]]:
        """(the paper layout, notes the analysis left in its ``attrs``): the frame is a copy without attrs."""
        frame = self.presentation(result).copy()
        found = [f"{str(key).replace('_', ' ')}: {value}" for key, value in frame.attrs.items()]
        frame.attrs = {}
        return frame, found

    def unmet(self, analysis: Any, requirements: Mapping[str, Callable[[Any], str | None]]) -> str | None:
        """The first unmet requirement's reason, or None (nothing is computed); ``requirements``: name -> check,
        the catalogue's (:data:`sst_interp.catalogue.REQUIREMENTS`)."""
        for requirement in self.requires:
            reason = requirements[requirement](analysis)
            if reason is not None:
                return reason
        return None

    def unsupported(self, analysis: Any, requirements: Mapping[str, Callable[[Any], str | None]]) -> str | None:
        """:meth:`unmet`, then :attr:`found` (for an entry without one that requires one of
        :data:`FOUND_BY_COMPUTING`: :func:`by_computing`): why ``analysis`` cannot support this measurement, or None
        (then it computes). May compute the analysis' shared steps, and a measurement found by computing."""
        reason = self.unmet(analysis, requirements)
        if reason is None:
            found = self.found
            if found is None and set(self.requires) & set(FOUND_BY_COMPUTING):
                found = by_computing(self.name)
            if found is not None:
                reason = found(analysis)
        return reason


# ------------------------------------------------------------------------------------------------ shared helpers
QUANTITY_DOC = {"quantity": "snake_case key of the paper table's row", "quantity_text": "the row's text",
                "statistic": "value, ci_low or ci_high (95% bounds of the quantity with the same key)",
                "unit": "percent, nats or empty", "value": "the number (float64)"}


def grouped(group_name: str, what: str) -> dict[str, str]:
    """:data:`QUANTITY_DOC` with a group column (``group_name``: what it holds) in front."""
    return {group_name: what, **QUANTITY_DOC}


def quantities(key: str, groups: tuple[str, ...] = ("value",), group_name: str | None = None
               ) -> Callable[[Any], pd.DataFrame]:
    """A ``tidy`` that melts a paper table of quantities (rows) by groups (columns): :func:`tidy.quantities`."""
    return lambda result: tidy.quantities(paper_table(result), key, groups, group_name)


def pe_part(attr: str) -> Callable[[Any], Any]:
    """A ``compute`` reading one part of the run's basin step (``a.punctuated``: the GMM, the summary, ...)."""
    def compute(a: Any) -> Any:
        pe = a.punctuated
        return pe if isinstance(pe, NotApplicable) else getattr(pe, attr)

    return compute


class Frame:
    """A plain DataFrame result (episode conduct returns one) behind the AnalysisResult interface."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame = frame

    def table(self) -> pd.DataFrame:
        return self.frame


def figure_main(result: Any) -> pd.DataFrame:
    """The ``tidy`` of a figure: its main frame as it is."""
    return tidy.renamed(result.table(), {})


def by_computing(name: str) -> Callable[[Any], str | None]:
    """A :attr:`Measurement.found` that computes the measurement (memoised, so ``data()`` reuses it) and reports
    what the analysis found: for the measurements of the iterations, whose support depends on what the shared steps
    find (a basin shift at position 0, a low-overlap argmax change, a ratio that is defined)."""
    def check(analysis: Any) -> str | None:
        result = analysis.computed(name)
        return result.reason if isinstance(result, NotApplicable) else None

    return check


#: The requirements after which ``available()`` computes a measurement before it promises it (its ``found``, when
#: the entry declares none): those comparing iterations or conditions. Their cost is the shared steps they read
#: (the basin step, the logit records), computed once per analysis.
FOUND_BY_COMPUTING = ("iterations", "comparison", "replayable")
