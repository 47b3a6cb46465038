"""The measurement registry: each measurement of one run declared once.

An entry says which paper table it reproduces (``label``), what a run must have for it (``requires``: declarative,
checked from the manifest without computing anything), how to compute it from a
:class:`~sst_interp.analyses.api.RunAnalysis` (``compute``, which reuses the analysis' shared steps), how to turn
the result into tidy data (``tidy``, documented by ``columns``), which provenance notes go with it (``notes``) and
the paper's layout (``presentation``). Everything else is generated from these entries:

- the :class:`~sst_interp.analyses.api.RunAnalysis` method of each entry (tidy data), ``table()``, ``data()``,
  ``result()``, ``notes()`` and ``available()``;
- the report's run-level tables (:mod:`sst_interp.reporting.measured`), which write ``presentation`` and
  ``notes`` of the same entry.

To add a measurement: write its analysis function in this package, then one :class:`Measurement` below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from sst_interp.analyses import tidy
from sst_interp.analyses.availability import UnknownMeasurement, spellings, stripped, unknown
from sst_interp.kernels.results import NotApplicable

# The functions below take the RunAnalysis of sst_interp.analyses.api (annotated Any: api imports this module).


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


def _replayable(a: Any) -> str | None:
    # Replaying halting rules needs a fixed-depth run with per-iteration logits and a rule it can read.
    from sst_interp.analyses.depth_policies import replay_reason

    return replay_reason(a.run)


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
    "replayable": _replayable,
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


def _paper_table(result: Any) -> pd.DataFrame:
    return result.table()


@dataclass(frozen=True)
class Measurement:
    """One measurement of one run.

    Args:
        name: the RunAnalysis method and the report artefact (``tab_<name>``) it backs.
        label: the paper label it reproduces (``tab:overthinking``), or "" for a table of this project's own.
        title: one line saying what it measures.
        requires: names in :data:`REQUIREMENTS`; all must hold for the measurement to be available.
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
        scope: what it measures: a ``run`` (:class:`~sst_interp.analyses.api.RunAnalysis`), a ``checkpoint``
            (:class:`~sst_interp.analyses.api.CheckpointAnalysis`), ``training`` logs
            (:class:`~sst_interp.analyses.api.TrainingAnalysis`) or an intervention ``experiment`` folder
            (:class:`~sst_interp.analyses.api.ExperimentAnalysis`); ``compute`` receives that object.
        family: the report's section it is written under (one of ``sst_interp.reporting.artefacts.FAMILIES``);
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
    presentation: Callable[[Any], pd.DataFrame] = _paper_table
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

    def unmet(self, analysis: Any) -> str | None:
        """The first unmet requirement's reason, or None (nothing is computed)."""
        for requirement in self.requires:
            reason = REQUIREMENTS[requirement](analysis)
            if reason is not None:
                return reason
        return None

    def unsupported(self, analysis: Any) -> str | None:
        """:meth:`unmet`, then :attr:`found`: why ``analysis`` cannot support this measurement, or None (then it
        computes). May compute the analysis' shared steps, never the measurement."""
        reason = self.unmet(analysis)
        if reason is None and self.found is not None:
            reason = self.found(analysis)
        return reason


# ------------------------------------------------------------------------------------------------ columns
QUANTITY_DOC = {"quantity": "snake_case key of the paper table's row", "quantity_text": "the row's text",
                "statistic": "value, ci_low or ci_high (95% bounds of the quantity with the same key)",
                "unit": "percent, nats or empty", "value": "the number (float64)"}


def _grouped(group_name: str, what: str) -> dict[str, str]:
    return {group_name: what, **QUANTITY_DOC}


def _quantities(key: str, groups: tuple[str, ...] = ("value",), group_name: str | None = None):
    return lambda result: tidy.quantities(_paper_table(result), key, groups, group_name)


# ------------------------------------------------------------------------------------------------ computations
def _pe_part(attr: str) -> Callable[[Any], Any]:
    def compute(a: Any) -> Any:
        pe = a.punctuated
        return pe if isinstance(pe, NotApplicable) else getattr(pe, attr)

    return compute


def _records(build: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda a: build(a.logit_records())


def _threshold_note(a: Any, result: Any) -> list[str]:
    threshold, origin = a.threshold
    return [f"regimes at overlap threshold {threshold:.4f} ({origin})"]


def _records_note(a: Any, result: Any) -> list[str]:
    threshold, origin = a.threshold
    records = a.logit_records()
    return [f"regimes at overlap threshold {threshold:.4f} ({origin}); window {records.max_positions} positions, "
            f"top-{records.top_n} comparisons"]


def _lazy(module: str, name: str) -> Callable[..., Any]:
    """A function of an analysis module, imported when first called (the registry itself stays light)."""
    def call(*args: Any, **kwargs: Any) -> Any:
        from importlib import import_module

        return getattr(import_module(f"sst_interp.analyses.{module}"), name)(*args, **kwargs)

    return call


def _overthinking(a: Any) -> Any:
    return _lazy("evaluation", "overthinking")(a.run, a.baseline, a.baseline_depth)


def _overthinking_notes(a: Any, result: Any) -> list[str]:
    return [] if a.baseline is not None else ["no --baseline run given: the matched-baseline reference row is "
                                              "omitted"]


def _precision(a: Any) -> Any:
    return _lazy("precision", "precision_proof")(a.run, a.regime_labels(), alpha=a.checkpoint_alpha())


def _precision_notes(a: Any, result: Any) -> list[str]:
    threshold, origin = a.threshold
    notes = [f"dtype {result.dtype}: machine epsilon {result.eps:.3g}",
             f"iterations {result.transition[0]} -> {result.transition[1]} of the depth-{result.depth} run at "
             f"{result.positions} {'basin-shift' if result.restricted else 'recorded'} positions (threshold "
             f"{threshold:.4f}, {origin})",
             "p: one-sided exact binomial test of the fraction above 1x against 0.5; ci_low: its one-sided 95% bound"]
    if result.bound is not None:
        b = result.bound
        notes.append(f"analytic bound: alpha in [{b.minimum:.4g}, {b.maximum:.4g}], minimum = "
                     f"{b.minimum / b.eps:.3g} eps; {b.below.get(3.0, 0)} of {b.n} coefficients <= 3 eps")
    else:
        notes.append("analytic alpha bound omitted: no checkpoint for this run")
    return notes


def _gmm_table(result: Any) -> pd.DataFrame:
    frame = result.table().copy()
    frame.attrs = {}  # the threshold and n go in the notes
    return frame


def _gmm_notes(a: Any, result: Any) -> list[str]:
    pe = a.punctuated
    return [f"crossover threshold: {result.threshold:.4f}", f"overlap values fitted: {result.n}",
            f"comparison: {getattr(pe.overlap, 'comparison', '')}", f"EM converged: {result.converged}"]


def _reorg(kind: str, regime: str) -> Callable[[Any], Any]:
    def compute(a: Any) -> Any:
        from sst_interp.analyses import logit_dynamics as ld

        return getattr(ld, f"reorg_{kind}")(a.logit_records(), ld.LOW if regime == "low" else ld.STABLE)

    return compute


def _repetition(a: Any) -> Any:
    from sst_interp.analyses import repetition

    gens = a.run.generations()
    depths = sorted(a.run.depths)
    configs: dict[str, pd.DataFrame] = {}
    if a.baseline is not None:
        configs[f"Baseline iter={a.baseline_depth}"] = repetition.select_depth(a.baseline.generations(),
                                                                               a.baseline_depth)
    configs[f"SST flat iter={depths[0]}"] = repetition.select_depth(gens, depths[0])
    if len(depths) >= 2:
        configs["SST staged"] = repetition.select_staged(gens)
        configs[f"SST flat iter={depths[-1]}"] = repetition.select_depth(gens, depths[-1])
    return repetition.repetition(configs, reference=next(iter(configs)))


class _Frame:
    """A plain DataFrame result (episode conduct returns one) behind the AnalysisResult interface."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame = frame

    def table(self) -> pd.DataFrame:
        return self.frame


def _episode_conduct(a: Any) -> Any:
    # The SST's episodes, and the matched baseline's beside them when there is one (its rows first).
    conduct = _lazy("episodes", "episode_conduct")
    result = conduct(a.run)
    if isinstance(result, NotApplicable):
        return result
    frames = [result.assign(model="SST")]
    if a.baseline is not None:
        base = conduct(a.baseline)
        if not isinstance(base, NotApplicable):
            frames.insert(0, base.assign(model="baseline"))
    table = pd.concat(frames, ignore_index=True)
    return _Frame(table[["model", *[c for c in result.columns]]])


def _figure_main(result: Any) -> pd.DataFrame:
    return tidy.renamed(result.table(), {})


def _profile_traces(result: Any) -> pd.DataFrame:
    """Every panel's traces in one frame, the panel named in ``panel``."""
    frames = [frame.assign(panel=name.removeprefix("traces_")) for name, frame in result.tables.items()
              if name.startswith("traces_")]
    long = pd.concat(frames, ignore_index=True)
    return tidy.renamed(long[["panel", "trace", "question_id", "position", "layer", "overlap"]], {})


HEATMAP_DOC = {"question_id": "the question shown", "depth": "the depth compared with the smallest (each one's last "
               "iteration)", "turn": "model turn", "position": "generated position", "layer": "decoder layer",
               "overlap": "top-k overlap"}


def _question_heatmap(zoom: bool) -> Callable[..., Any]:
    def compute(a: Any, question: str, depth: int | None, turn: int | None) -> Any:
        return _lazy("by_question", "question_heatmap")(a, question, depth, turn or 0, zoom=zoom)

    return compute
PROFILE_DOC = {"panel": "position0, late, p<k> or long", "trace": "trace index within the panel",
               "question_id": "question", "position": "generated position", "layer": "decoder layer",
               "overlap": "top-k overlap"}

REGIME = ("low_overlap", "stable")
WITHIN_CROSS = ("within", "cross")

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
    return tidy.renamed(_lazy("checkpoint_figures", "loss_frame")(result), {})


#: Every measurement, in the report's order.
MEASUREMENTS: tuple[Measurement, ...] = (
    # ---- evaluation (sec:evaluation)
    Measurement("staged_breakdown", "tab:staged_breakdown", "Staged compute capacity: questions solved at some "
                "depth up to each stage.", ("depths",),
                lambda a: _lazy("evaluation", "staged_breakdown")({a.name: a.run}),
                lambda r: tidy.stages(r.table()),
                {"benchmark": "the run's benchmark", "n_questions": "questions", "stage": "the deepest depth "
                 "allowed", "cumulative_accuracy_pct": "questions solved at some depth <= stage, percent"}),
    Measurement("main_results", "tab:main_results", "Matched baseline vs SST at staged compute.", ("baseline",),
                lambda a: _lazy("evaluation", "main_results")({a.name: (a.run, a.baseline)},
                                                              baseline_depth=a.baseline_depth),
                lambda r: tidy.renamed(r.table(), {"N": "n_questions", "baseline": "baseline_accuracy_pct",
                                                   "sst": "sst_accuracy_pct", "error_correction":
                                                   "error_correction_pct"}),
                {"benchmark": "benchmark", "n_questions": "questions", "baseline_accuracy_pct": "baseline accuracy",
                 "sst_accuracy_pct": "SST accuracy", "sst_condition": "which SST condition", "delta_pp":
                 "difference in percentage points", "error_correction_pct": "(SST - baseline) / (100 - baseline)",
                 "sst_only": "questions only the SST solves", "baseline_only": "questions only the baseline solves",
                 "mcnemar_exact_p": "exact McNemar p"}),
    Measurement("overthinking", "tab:overthinking", "Staged compute and each flat depth against the shallowest "
                "depth: regressions, recoveries, McNemar tests.", (), _overthinking,
                lambda r: tidy.renamed(r.table(), {"accuracy": "accuracy_pct"}),
                {"condition": "staged compute, flat depth d or the baseline", "compared_with": "the reference",
                 "accuracy_pct": "accuracy", "delta_pp": "accuracy minus the reference's, points",
                 "regressions": "questions right in the reference, wrong here", "recoveries": "the reverse",
                 "mcnemar_chi2_cc": "McNemar chi2, continuity corrected", "mcnemar_p_cc": "its p",
                 "mcnemar_chi2": "McNemar chi2", "mcnemar_p": "its p", "mcnemar_exact_p": "exact McNemar p"},
                notes=_overthinking_notes,
                family="Evaluation", inputs=("run", "baseline"), caption="Overthinking regression: accuracy "
                "of staged compute and of each flat depth, each paired with the shallowest depth (regressions, "
                "recoveries, McNemar tests)."),
    Measurement("repetition", "tab:repetition", "Sentence-level repetition and loops per configuration.", (),
                _repetition,
                lambda r: tidy.renamed(r.table(), {"N": "n_turns", "sentence_repetition":
                                                   "sentence_repetition_pct"}),
                {"configuration": "baseline, SST flat or staged", "n_turns": "model turns",
                 "sentence_repetition_pct": "turns with a repeated sentence", "loops": "turns in a loop",
                 "mann_whitney_p": "against the first configuration"}),
    Measurement("convergent_reasoning", "tab:convergent_reasoning", "Questions correct at every depth with "
                "distinct text traces, against chance.", ("depths",),
                lambda a: _lazy("convergent", "convergent_reasoning")(a.run), _quantities("quantity"),
                QUANTITY_DOC,
                family="Logit dynamics", caption="Convergent reasoning: questions correct at every depth with "
                "pairwise distinct text traces, against the chance of independent random answers."),
    Measurement("episode_conduct", "", "CodeACT episode conduct per depth, of the SST and of its matched baseline "
                "when one is given.", ("codeact",), _episode_conduct,
                lambda r: tidy.renamed(r.table(), {}),
                {"model": "SST or baseline", "depth": "depth", "episodes": "episodes", "first_turn_action": "fraction whose first turn is a "
                 "well-formed <execute> block", "finished": "fraction ending with finish_session", "accuracy":
                 "fraction correct", "mean_model_turns": "model turns per episode"},
                family="Evaluation", inputs=("run", "baseline"), caption="CodeACT episode conduct per depth: "
                "fractions of episodes whose first model turn is a well-formed <execute> block, that end with "
                "finish_session, and that are correct (app:dataset_format)."),
    # ---- basin shifts (sec:punctuated_equilibrium, app:gmm)
    Measurement("gmm", "", "Two-component Gaussian mixture on the overlaps and its crossover threshold (app:gmm).",
                ("iterations",), _pe_part("gmm"), lambda r: tidy.renamed(_gmm_table(r), {}),
                {"component": "Stable or Low-overlap", "mean": "mean overlap", "std": "standard deviation",
                 "weight": "mixture weight"}, notes=_gmm_notes, presentation=_gmm_table,
                family="Basin shifts (punctuated equilibrium)", caption="Two-component Gaussian mixture on "
                "the iter-1 vs iter-N overlaps: stable and low-overlap components and their crossover threshold "
                "(app:gmm)."),
    Measurement("gmm_robustness", "", "Crossover thresholds of 2- to 5-component mixtures (app:gmm).",
                ("iterations",), _pe_part("robustness"), lambda r: tidy.renamed(r.table(), {}),
                {"components": "mixture components", "threshold": "crossover", "shift": "from the 2-component "
                 "threshold", "stable_mean": "stable component mean", "stable_std": "its std",
                 "stable_weight": "its weight"},
                notes=lambda a, r: [f"largest threshold shift from the 2-component fit: {r.max_shift:.4f}"],
                family="Basin shifts (punctuated equilibrium)", caption="Crossover threshold of 2- to "
                "5-component mixtures (app:gmm robustness)."),
    Measurement("basin_summary", "", "Low-overlap positions per question, per-position rates, gaps "
                "(sec:punctuated_equilibrium).", ("iterations",), _pe_part("summary"), _quantities("metric"),
                QUANTITY_DOC,
                family="Basin shifts (punctuated equilibrium)", caption="Low-overlap positions per question, "
                "per-position rates, gaps between consecutive low-overlap positions and their coefficient of "
                "variation (sec:punctuated_equilibrium)."),
    Measurement("basin_position_rates", "", "Fraction of questions low-overlap at each window position.",
                ("iterations",), _pe_part("summary"), lambda r: tidy.renamed(r.position_table(), {}),
                {"position": "generated position", "n_questions": "questions", "n_low": "low-overlap there",
                 "rate": "fraction"},
                notes=lambda a, r: [f"threshold {r.threshold:.4f}, rule '{r.rule}'"],
                presentation=lambda r: r.position_table(),
                family="Basin shifts (punctuated equilibrium)", caption="Fraction of questions with a "
                "low-overlap (basin-shift) position at each window position."),
    Measurement("pos0_universality", "", "Position 0, iteration 1 vs 2: the universal basin shift.",
                ("iterations",), _pe_part("pos0"), lambda r: tidy.renamed(r.table(), {}),
                {"comparison": "what is compared", "n_questions": "questions", "n_low": "low-overlap",
                 "mean_overlap": "mean layer-mean overlap", "std_overlap": "its std"},
                family="Basin shifts (punctuated equilibrium)", caption="Position 0, iteration 1 vs 2: mean "
                "and std over questions of the layer-mean overlap and how many questions are low-overlap there."),
    Measurement("causal_ordering", "tab:causal_ordering", "First low-overlap position vs first argmax "
                "divergence.", ("iterations",), _pe_part("causal"),
                lambda r: tidy.categories(r.table(), "group", {"n": "n_questions", "percent": "percent"}),
                {"category": "ordering key", "category_text": "the paper's row", "n_questions": "questions",
                 "percent": "percent of questions"},
                family="Logit dynamics", caption="Order of the first low-overlap position and the first "
                "argmax divergence between depths, per question."),
    Measurement("pos0_divergence", "tab:pos0_divergence", "Outcome of the questions with a basin shift at "
                "position 0.", ("iterations",), _pe_part("pos0_divergence"),
                lambda r: tidy.categories(r.table(), "outcome", {"n": "n_questions", "percent": "percent"}),
                {"category": "outcome key", "category_text": "the paper's row", "n_questions": "questions",
                 "percent": "percent of questions"},
                family="Logit dynamics", caption="Downstream outcome of the questions with a basin shift at "
                "position 0: diverge at 0, inside the window, or beyond it."),
    # ---- logit dynamics (sec:logit_dynamics, app:logit_tables)
    Measurement("argmax_concentration", "tab:argmax_concentration", "Argmax change rates at low-overlap vs "
                "stable positions.", ("iterations",), _records(_lazy("logit_dynamics", "argmax_concentration")),
                _quantities("quantity", (*REGIME, "total"), "regime"), _grouped("regime", "low_overlap, stable "
                                                                                 "or total"),
                notes=_records_note,
                family="Logit dynamics", caption="Argmax change rates at low-overlap vs stable positions "
                "(cross-run, all depth pairs, pre-divergence), with the odds ratio."),
    Measurement("decision_boundary", "tab:decision_boundary", "Exact ties vs strict overrides among argmax "
                "changes.", ("iterations",), _records(_lazy("logit_dynamics", "decision_boundary")),
                _quantities("quantity"), QUANTITY_DOC, notes=_records_note,
                family="Logit dynamics", caption="Exact ties vs strict overrides among argmax changes, and "
                "the top-1 log-prob shift at changes vs non-changes (cross-run)."),
    Measurement("gap_distributions", "tab:gap_distributions", "Top-1 minus top-2 gap at argmax changes by "
                "regime.", ("iterations",), _records(_lazy("logit_dynamics", "gap_distributions")),
                _quantities("quantity", REGIME, "regime"), _grouped("regime", "low_overlap or stable"),
                notes=_records_note,
                family="Logit dynamics", caption="Top-1 minus top-2 gap at argmax-changing positions by "
                "regime (within-run, iter 1 vs later iterations)."),
    Measurement("reorg_lo_argmax", "tab:reorg_lo_argmax", "Posterior reorganisation at low-overlap argmax "
                "changes.", ("iterations",), _reorg("argmax", "low"),
                _quantities("quantity", WITHIN_CROSS, "comparison"), _grouped("comparison", "within or cross run"),
                notes=_records_note,
                family="Logit dynamics", caption="Posterior reorganisation at low-overlap argmax changes: "
                "top-n replacement, top-5 rank shifts, argmax suppression, rank of the new winner (within- and "
                "cross-run)."),
    Measurement("reorg_st_argmax", "tab:reorg_st_argmax", "Posterior reorganisation at stable argmax changes.",
                ("iterations",), _reorg("argmax", "stable"), _quantities("quantity", WITHIN_CROSS, "comparison"),
                _grouped("comparison", "within or cross run"), notes=_records_note,
                family="Logit dynamics", caption="Posterior reorganisation at stable argmax changes (within- "
                "and cross-run)."),
    Measurement("reorg_lo_all", "tab:reorg_lo_all", "Top-n replacement at every low-overlap position.",
                ("iterations",), _reorg("all", "low"), _quantities("quantity", WITHIN_CROSS, "comparison"),
                _grouped("comparison", "within or cross run"), notes=_records_note,
                family="Logit dynamics", caption="Top-n replacement and argmax change rate at every "
                "low-overlap position (within- and cross-run)."),
    Measurement("reorg_st_all", "tab:reorg_st_all", "Top-n replacement at every stable position.",
                ("iterations",), _reorg("all", "stable"), _quantities("quantity", WITHIN_CROSS, "comparison"),
                _grouped("comparison", "within or cross run"), notes=_records_note,
                family="Logit dynamics", caption="Top-n replacement and argmax change rate at every stable "
                "position (within- and cross-run)."),
    Measurement("basin_shift_activity", "tab:basin_shift_activity", "Basin shifts across consecutive iteration "
                "transitions of the deepest run.", ("iterations",),
                lambda a: _lazy("logit_dynamics", "basin_shift_activity")(a.regime_labels()),
                lambda r: tidy.categories(r.table(), "activity", {"count": "n_positions", "percent": "percent",
                                                                  "ci_low": "ci_low_pct", "ci_high": "ci_high_pct"}),
                {"category": "activity key", "category_text": "the paper's row", "n_positions": "positions",
                 "percent": "percent", "ci_low_pct": "95% bound", "ci_high_pct": "95% bound"},
                notes=_threshold_note,
                family="Logit dynamics", caption="Basin shifts of the deepest run across consecutive "
                "iteration transitions: sustained, first transition only, or new at a later transition."),
    Measurement("later_iter_computation", "tab:later_iter_computation", "Later-iteration computation by "
                "regime.", ("iterations",), _records(_lazy("logit_dynamics", "later_iter_computation")),
                _quantities("quantity", ("basin_shift", "stable"), "regime"),
                _grouped("regime", "basin_shift or stable"), notes=_records_note,
                family="Logit dynamics", caption="Later-iteration computation by regime: cumulative log-prob "
                "shift ratios, reversal rates, argmax re-changes and question-level stabilisation."),
    # ---- precision and convergence monitoring (app:precision_proof, fig:convergence_monitoring)
    Measurement("precision_proof", "tab:precision_proof", "Iteration 1 -> 2 change against the dtype's rounding "
                "error, per layer.", ("iterations",), _precision,
                lambda r: tidy.renamed(r.table(), {"n": "n_values", "frac_above_1": "fraction_above_1"}),
                {"layer": "decoder layer (or all)", "n_values": "ratios", "median": "median ratio", "p25": "25th "
                 "percentile", "p75": "75th", "p95": "95th", "fraction_above_1": "fraction above 1x", "p":
                 "one-sided exact binomial p", "ci_low": "one-sided 95% bound"},
                notes=_precision_notes, extra_tables=lambda r: {"layers": r.full_table()},
                family="Precision and convergence monitoring", inputs=("run", "checkpoint"), caption="Per-layer "
                "ratio of the iteration 1 -> 2 hidden-state change to the dtype's rounding error at basin-shift "
                "positions; under the rounding null the ratio is <= 1."),
    Measurement("convergence_monitoring", "", "Tests behind fig:convergence_monitoring: L2 of the state does not "
                "tell when to stop.", ("iterations",), lambda a: a.convergence(), _quantities("metric"),
                QUANTITY_DOC,
                notes=lambda a, r: [f"L2 deltas at layer {r.layer}; one value per (question, decision) in the "
                                    "tests"],
                family="Precision and convergence monitoring", caption="Tests behind the convergence figure: "
                "Kruskal-Wallis across correct depths per transition, and Mann-Whitney / AUROC of the current delta "
                "for improving vs degrading steps."),
    # ---- the data behind the run-level figures (analyses/figure_data.py)
    Measurement("overthinking_sankey", "fig:overthinking_sankey", "Pass/fail flows between consecutive flat "
                "depths.", ("depths",), _lazy("figure_data", "sankey"), lambda r: tidy.renamed(r.table(), {}),
                {"from_depth": "depth", "to_depth": "next depth", "from_state": "pass or fail",
                 "to_state": "pass or fail", "count": "questions"}, kind="figure",
                family="Evaluation", figure="sankey", caption="Per-question pass/fail flows between "
                "consecutive flat depths: ribbons pass->pass, pass->fail (regression), fail->pass (recovery), "
                "fail->fail; accuracy above each column."),
    Measurement("overlap_heatmap", "fig:overlap_heatmap", "Top-k overlap across layers and positions for a "
                "representative question.", ("iterations",), _lazy("figure_data", "heatmap"), _figure_main,
                HEATMAP_DOC, kind="figure", per_question=_question_heatmap(False),
                family="Basin shifts (punctuated equilibrium)", figure="overlap_heatmap", caption="Top-k "
                "overlap between the shallowest and deepest runs across layers and generated positions for a "
                "representative question (sketch positions included); dark streaks are basin shifts."),
    Measurement("overlap_heatmap_zoom", "fig:overlap_heatmap_zoom", "The overlap of a second question over the "
                "full-state window.", ("iterations",), lambda a: _lazy("figure_data", "heatmap")(a, zoom=True),
                _figure_main, HEATMAP_DOC, kind="figure", per_question=_question_heatmap(True),
                family="Basin shifts (punctuated equilibrium)", figure="overlap_heatmap", caption="The same "
                "overlap for a second question over the full-state window only (the question with the most "
                "low-overlap positions)."),
    Measurement("layer_profile", "fig:layer_profile", "Layer profile of top-k overlap at low-overlap positions: "
                "position 0 and late positions.", ("iterations",), _lazy("figure_data", "layer_profile"),
                _profile_traces, PROFILE_DOC, kind="figure",
                family="Basin shifts (punctuated equilibrium)", figure="layer_profiles", caption="Layer "
                "profile of top-k overlap at low-overlap positions: (a) position 0, (b) the last window positions "
                "(pre-divergence); median with IQR, p10-p90 and p5-p95 bands."),
    Measurement("layer_profile_per_position", "fig:layer_profile_per_position", "Layer profile at low-overlap "
                "positions, per window position.", ("iterations",), _lazy("figure_data", "per_position"),
                _profile_traces, PROFILE_DOC, kind="figure",
                family="Basin shifts (punctuated equilibrium)", figure="layer_profiles", caption="Layer "
                "profile at low-overlap positions, one panel per window position (bands for N >= 5, individual traces "
                "below)."),
    Measurement("layer_profile_512pos", "fig:layer_profile_512pos", "Layer profile over every low-overlap "
                "position of the long range.", ("iterations",), _lazy("figure_data", "long_range"),
                _profile_traces, PROFILE_DOC, kind="figure",
                family="Basin shifts (punctuated equilibrium)", figure="layer_profiles", caption="Layer "
                "profile over every low-overlap position of the long range (full window plus top-k sketches)."),
    Measurement("convergence_figure", "fig:convergence_monitoring", "L2 delta between successive iterations "
                "by correct depth.", ("iterations",), _lazy("figure_data", "convergence"), _figure_main,
                {"question_id": "question", "position": "generated position", "transition": "iteration i -> i+1",
                 "delta": "L2 change of the state", "correct_depth": "the depth the question is first right at"},
                kind="figure",
                family="Precision and convergence monitoring", figure="convergence", caption="L2 delta "
                "between successive iterations by correct depth (a), and the current delta against the next step's "
                "outcome (b): L2 does not tell when to stop."),
    # ---- the checkpoint's learned blend coefficients (sec:learned_alpha, app:alpha_analysis)
    Measurement("alpha_quantile_ribbon", "fig:alpha_quantile_ribbon", "Within-layer percentile bands of the learned "
                "blend coefficients.", ("checkpoint",), _lazy("checkpoint_figures", "ribbon"), _figure_main,
                RIBBON_DOC, kind="figure", scope="checkpoint",
                family="Learned blend coefficients and training", figure="alpha_ribbon", caption="Within-layer "
                "percentile bands (p5-p95, p25-p75, median) of the learned blend coefficients, with alpha_init."),
    Measurement("alpha_pca_trajectory", "fig:alpha_pca_trajectory", "Each layer's deviation from alpha_init on the "
                "top principal components.", ("checkpoint",), _lazy("checkpoint_figures", "pca"), _figure_main,
                PCA_DOC, kind="figure", scope="checkpoint",
                family="Learned blend coefficients and training", figure="alpha_pca", caption="Each layer's "
                "deviation from alpha_init on the top principal components, coloured by layer and joined in depth "
                "order."),
    Measurement("alpha_panels_raw_selected", "fig:alpha_panels_raw_selected", "Raw alpha of four representative "
                "layers on a grid.", ("checkpoint",), lambda c: _lazy("checkpoint_figures", "panels")(c, False),
                _figure_main, PANELS_DOC, kind="figure", scope="checkpoint",
                family="Learned blend coefficients and training", figure="alpha_panels_raw", caption="Raw "
                "alpha of four representative layers reshaped to a grid, on a shared p1-p99 colour scale."),
    Measurement("alpha_panels_deviation_selected", "fig:alpha_panels_deviation_selected", "Deviation from "
                "alpha_init of the same four layers.", ("checkpoint",),
                lambda c: _lazy("checkpoint_figures", "panels")(c, False), _figure_main, PANELS_DOC, kind="figure",
                scope="checkpoint",
                family="Learned blend coefficients and training", figure="alpha_panels_deviation", caption="Deviation "
                "alpha - alpha_init of the same four layers on a shared diverging scale (red above, blue below)."),
    Measurement("alpha_specialisation_profile", "fig:alpha_specialisation_profile", "Within-layer percentiles of "
                "|alpha - alpha_init| across depth.", ("checkpoint",), _lazy("checkpoint_figures", "specialisation"),
                _figure_main, SPECIALISATION_DOC, kind="figure", scope="checkpoint",
                family="Learned blend coefficients and training", figure="alpha_specialisation", caption="Within-layer "
                "percentiles of |alpha - alpha_init| across depth; the selected layers are marked."),
    Measurement("alpha_panels_raw_full", "fig:alpha_panels_raw_full", "Raw alpha of every layer.", ("checkpoint",),
                lambda c: _lazy("checkpoint_figures", "panels")(c, True), _figure_main, PANELS_DOC, kind="figure",
                scope="checkpoint",
                family="Learned blend coefficients and training", figure="alpha_panels_raw", caption="Raw "
                "alpha of every layer on a shared colour scale."),
    Measurement("alpha_panels_deviation_full", "fig:alpha_panels_deviation_full", "Deviation from alpha_init of "
                "every layer.", ("checkpoint",), lambda c: _lazy("checkpoint_figures", "panels")(c, True),
                _figure_main, PANELS_DOC, kind="figure", scope="checkpoint",
                family="Learned blend coefficients and training", figure="alpha_panels_deviation", caption="Deviation "
                "from alpha_init of every layer on a shared scale."),
    # ---- training logs (app:training_curves)
    Measurement("sst_vs_baseline_loss", "fig:sst_vs_baseline_loss", "Training and validation loss of the SST and "
                "the matched baseline.", ("sst_log", "baseline_log"),
                lambda t: _lazy("checkpoint_figures", "losses")(t, "both"), _losses_tidy, LOSS_DOC, kind="figure",
                scope="training",
                family="Learned blend coefficients and training", figure="losses", caption="Training loss "
                "(raw, light; moving average, solid) and validation loss of the SST and the matched baseline."),
    Measurement("sst_loss_standalone", "fig:sst_loss_standalone", "SST training and validation loss.", ("sst_log",),
                lambda t: _lazy("checkpoint_figures", "losses")(t, "sst"), _losses_tidy, LOSS_DOC, kind="figure",
                scope="training",
                family="Learned blend coefficients and training", figure="losses", caption="SST training and "
                "validation loss."),
    Measurement("baseline_loss_standalone", "fig:baseline_loss_standalone", "Matched baseline training and "
                "validation loss.", ("baseline_log",), lambda t: _lazy("checkpoint_figures", "losses")(t, "baseline"),
                _losses_tidy, LOSS_DOC, kind="figure", scope="training",
                family="Learned blend coefficients and training", figure="losses", caption="Matched baseline "
                "training and validation loss."),
    Measurement("alpha_global_stats_over_training", "fig:alpha_global_stats_over_training", "Whole-model blend "
                "coefficient statistics per training step.", ("sst_log",),
                _lazy("checkpoint_figures", "alpha_over_training"), _figure_main, ALPHA_TRAINING_DOC, kind="figure",
                scope="training",
                family="Learned blend coefficients and training", figure="alpha_training", caption="Whole-model "
                "blend coefficient statistics (mean +- std, min, max) per training step."),
)

#: Per-position depth policies (issue 23): accuracy against compute, where the rules stop (analyses/depth_policies.py).
PARETO_DOC = {"run": "run directory name", "condition": "short label of the row", "policy": "fixed:D, staged:D,..., "
              "or the canonical policy string", "source": "live (recorded), oracle (staged capacity, in hindsight), "
              "replayed (a per-turn probe on the flat runs) or simulated (a rule replayed on a fixed-depth run)",
              "n_questions": "questions",
              "accuracy_pct": "accuracy (live and oracle rows; NaN for simulated)",
              "accuracy_low_pct": "lower bound: diverged questions counted wrong",
              "accuracy_high_pct": "upper bound: diverged questions counted right",
              "exact_questions": "questions whose outcome is known exactly",
              "mean_iterations": "mean iterations per generated token", "basis": "what mean_iterations is "
              "measured on", "wall_s": "wall time of the run, seconds, where measured", "pareto": "on the "
              "accuracy/iterations front of the measured rows"}
HISTOGRAM_DOC = {"rule": "kl, entropy, margin or state", "policy": "the rule at the median of its recorded values",
                 "regime": "low_overlap, stable or unlabelled (no overlap label: past the full-state window, or a "
                 "later turn)", "iterations": "where the rule stops on the full-depth trajectory",
                 "positions": "positions", "fraction": "of the rule's positions in the regime"}
AGREEMENT_DOC = {"rule": "rule", "policy": "the rule at the median of its recorded values",
                 "positions": "positions with both decisions", "agree": "fraction stopping at the same iteration",
                 "earlier": "fraction where the rule stops before the L2 convergence point",
                 "later": "fraction where it stops after", "mean_difference": "rule minus convergence, iterations",
                 "cohen_kappa": "Cohen's kappa of the two stopping iterations",
                 "spearman_rho": "Spearman correlation", "spearman_p": "its p"}


def _pareto_figure(a: Any) -> Any:
    from sst_interp.analyses.figure_data import FigureData

    result = a.attempt("tab_depth_pareto")
    if isinstance(result, NotApplicable):
        return result
    return FigureData({"points": result.table()}, {"notes": list(result.notes)})


def _agreement_notes(a: Any, r: Any) -> list[str]:
    return [f"convergence point: the first iteration >= 2 whose L2 change of layer {r.layer}'s state is below "
            f"{r.l2_threshold:.4g} (the median change of the run), else {r.depth}",
            "decisions read on the recorded full-depth trajectory (every position's own iterations), not on a live "
            "policy run"]


DEPTH_POLICY_MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement("depth_pareto", "", "Accuracy against mean iterations per generated token: flat depths, staged "
                "capacity, per-position policies (live, or simulated on a fixed-depth run).", ("comparison",),
                _lazy("depth_policies", "pareto_of"),
                lambda r: tidy.renamed(r.table(), {}), PARETO_DOC, notes=lambda a, r: list(r.notes)),
    Measurement("depth_pareto_front", "", "Accuracy against iterations per token (the Pareto table drawn).",
                ("comparison",),
                _pareto_figure, _figure_main, PARETO_DOC, kind="figure"),
    Measurement("depth_policy_histogram", "", "Iterations per position where each rule stops, low-overlap "
                "positions against the rest.", ("iterations", "replayable"),
                _lazy("depth_policies", "histogram_figure"), _figure_main, HISTOGRAM_DOC, kind="figure",
                family="Per-position depth", figure="policy_histogram", caption="Where each rule, at the "
                "median of its recorded values, stops on the full-depth trajectory: low-overlap (basin-shift) "
                "positions against the rest."),
    Measurement("depth_policy_convergence", "", "Where each rule stops against where L2 convergence monitoring "
                "says the state converged.", ("iterations", "replayable"), _lazy("depth_policies", "agreement"),
                lambda r: tidy.renamed(r.table(), {}), AGREEMENT_DOC, notes=_agreement_notes,
                family="Per-position depth", caption="Each rule's stopping iteration against the L2 "
                "convergence point of the state (the first iteration whose change is below the run's median change): "
                "agreement, Cohen's kappa, Spearman."),
)
MEASUREMENTS = (*MEASUREMENTS, *DEPTH_POLICY_MEASUREMENTS)


#: Across latent-iteration families (docs/families.md): one run's rows of the report's side-by-side figures, which
#: stack this entry over every run of the report (sst_interp/reporting/specs_families.py).
FAMILY_STATE_DOC = {"run": "run name", "family": "sst, hrm_text or inkling2_loop",
                    "iteration": "i >= 2: the transition i-1 -> i of the deepest depth",
                    "overlap": "mean top-k |value| overlap of the carried state, k = the manifest's sketch_k",
                    "relative_change": "mean ||s_i - s_{i-1}|| / ||s_{i-1}|| of the carried state",
                    "n_positions": "full positions averaged"}
FAMILY_CAPACITY_DOC = {"run": "run name", "family": "sst, hrm_text or inkling2_loop",
                       "depth": "the family's loop count", "accuracy_pct": "accuracy at that flat depth",
                       "staged_capacity_pct": "correct at some depth <= this one",
                       "n_questions": "questions recorded at every depth"}


def _family_figure(measure: str) -> Callable[[Any], Any]:
    """A run's rows of a cross-family figure, as figure data (or the reason the run cannot give them)."""
    def compute(a: Any) -> Any:
        from sst_interp.analyses.figure_data import FigureData

        result = _lazy("families", measure)(a.run, a.run.path.name)
        return result if isinstance(result, NotApplicable) else FigureData({"main": result}, {})

    return compute


FAMILY_CONVERGENCE_DOC = {"run": "run name", "family": "sst, hrm_text or inkling2_loop",
                          "depth": "the deepest depth (the family's loop count)",
                          "first_change": "mean relative L2 change of the carried state, transition 1 -> 2",
                          "last_change": "the same for the last transition (depth-1 -> depth)",
                          "last_over_first": "last_change / first_change",
                          "half_change_iteration": "first iteration i >= 3 whose change is at most half of "
                          "first_change (NaN: none)",
                          "first_overlap": "top-k |value| overlap of the transition 1 -> 2",
                          "last_overlap": "the same for the last transition", "n_positions": "full positions averaged"}


def _family_convergence(c: Any) -> Any:
    """Every run of a comparison, one row each; the runs without a state profile are named in the notes."""
    rows, skipped = [], []
    for name, run in c.runs.items():
        result = _lazy("families", "convergence_profile")(run, name)
        if isinstance(result, NotApplicable):
            skipped.append(f"{name}: {result.reason}")
        else:
            rows.append(result)
    if not rows:
        return NotApplicable("; ".join(skipped) or "no run given", "tab_family_convergence")
    frame = pd.concat(rows, ignore_index=True)
    if skipped:
        frame.attrs["runs_left_out"] = "; ".join(skipped)
    return _Frame(frame)


FAMILY_MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement("family_state", "", "The carried loop state across iterations (overlap and relative change), "
                "comparable across families.", ("iterations",), _family_figure("state_profile"), _figure_main,
                FAMILY_STATE_DOC, kind="figure"),
    Measurement("family_capacity", "", "Accuracy and staged capacity per loop count, comparable across families.",
                ("depths",), _family_figure("capacity_profile"), _figure_main, FAMILY_CAPACITY_DOC, kind="figure"),
    Measurement("family_convergence", "", "How fast the carried loop state settles (first and last transitions' "
                "relative change), every run side by side.", (), _family_convergence,
                lambda r: tidy.renamed(r.table(), {}), FAMILY_CONVERGENCE_DOC, scope="comparison",
                found=lambda c: _by_computing("family_convergence")(c), family="Across latent-iteration families", inputs=("runs",), caption="How fast the carried loop "
                "state settles, every run of the report side by side: the relative L2 change of its first (1 -> 2) "
                "and last iteration transitions, their ratio, the first iteration whose change is at most half the "
                "first one, and the top-k overlap at both ends."),
)
MEASUREMENTS = (*MEASUREMENTS, *FAMILY_MEASUREMENTS)


def _by_computing(name: str) -> Callable[[Any], str | None]:
    """A :attr:`Measurement.found` that computes the measurement (memoised, so ``data()`` reuses it) and reports
    what the analysis found: for the measurements of the iterations, whose support depends on what the shared steps
    find (a basin shift at position 0, a low-overlap argmax change, a ratio that is defined)."""
    def check(analysis: Any) -> str | None:
        result = analysis.computed(name)
        return result.reason if isinstance(result, NotApplicable) else None

    return check


#: The measurements ``available()`` computes before it promises them: those comparing iterations or conditions.
#: Their cost is the shared steps they read (the basin step, the logit records), computed once per analysis.
FOUND_BY_COMPUTING = ("iterations", "comparison", "replayable")
MEASUREMENTS = tuple(replace(m, found=_by_computing(m.name)) if m.found is None and set(m.requires) &
                     set(FOUND_BY_COMPUTING) else m for m in MEASUREMENTS)


#: Modules of the floors above this package that declare measurements of their own (the halting probe's tables):
#: imported by name the first time the registry is listed or searched, since this package never imports upwards.
EXTENSIONS: tuple[str, ...] = ("sst_interp.probe.measurements", "sst_interp.experiments.measurements",
                               "sst_interp.analyses.comparisons")


BY_KEY: dict[str, Measurement] = {}
_REGISTERED: list[Measurement] = []
_extensions_loaded = False


def register_requirement(name: str, check: Callable[[Any], str | None]) -> None:
    """Add a declarative requirement (an extension's: e.g. "the folder holds a window experiment"); ``check``
    returns the reason it is unmet, or None, and must compute nothing."""
    if name in REQUIREMENTS:
        raise ValueError(f"requirement {name!r} declared twice")
    REQUIREMENTS[name] = check


def register(*entries: Measurement) -> None:
    """Add measurements to the registry (an extension module calls this when it is imported).

    Raises:
        ValueError: a name, label or artefact is already declared.
    """
    for entry in entries:
        unknown = set(entry.requires) - set(REQUIREMENTS)
        if unknown:
            raise ValueError(f"measurement {entry.name} requires unknown {sorted(unknown)}; known: "
                             f"{', '.join(REQUIREMENTS)}")
        keys = {entry.name, *spellings(entry.key), entry.artefact}
        for key in keys:
            if key in BY_KEY:
                raise ValueError(f"measurement key {key!r} declared twice")
        for key in keys:
            BY_KEY[key] = entry
        _REGISTERED.append(entry)


register(*MEASUREMENTS)


def all_measurements() -> tuple[Measurement, ...]:
    """Every measurement: this package's, then the extensions' (imported on the first call)."""
    global _extensions_loaded
    if not _extensions_loaded:
        _extensions_loaded = True
        from importlib import import_module

        for module in EXTENSIONS:
            import_module(module)
    return tuple(_REGISTERED)


def lookup(key: str) -> Measurement:
    """The measurement named by its key (``tab:overthinking``, ``tab:gmm``), its name (``gmm``) or its artefact
    (``tab_gmm``); ``tab:``, ``tab_``, ``fig:`` and ``fig_`` are accepted in front of any of them.

    Raises:
        UnknownMeasurement: no measurement has the name (a NotAvailable; the message suggests the closest ones).
    """
    if not isinstance(key, str):
        raise UnknownMeasurement(f"a measurement key is a string such as 'tab:overthinking', got {type(key).__name__}")
    if key not in BY_KEY:
        all_measurements()
    found = BY_KEY.get(key.strip()) or BY_KEY.get(stripped(key))
    if found is None:
        everything = all_measurements()
        raise unknown(key, [m.key for m in everything], [m.name for m in everything])
    return found
