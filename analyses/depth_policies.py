"""Per-position depth policies measured as accuracy against compute (issue 23, item 4): the catalogue entries.

Three measurements, all from recorded runs, each computed by its own module:

- **Pareto rows** (:func:`~sst_interp.analyses.depth_pareto.pareto`, :mod:`sst_interp.analyses.depth_pareto`): one
  row per condition: accuracy, mean iterations per generated token and, where known, wall time; flat depths, the
  staged oracle, a run's own live policy, and a simulated threshold sweep of every rule a fixed-depth run can
  replay (what a simulated row can say: that module's docstring).
- **Iterations per position by regime** (:func:`~sst_interp.analyses.depth_positions.iteration_histogram`): where
  each rule would stop on the recorded full-depth trajectory, split into low-overlap positions (a basin shift
  between iteration 1 and ``max``, the paper's regime labels at the run's GMM crossover) and the rest.
- **Agreement with convergence monitoring**
  (:func:`~sst_interp.analyses.depth_agreement.convergence_agreement`): the iteration each rule stops at against
  the iteration at which the L2 change of the last layer's state falls below the run's median change (the quantity
  of ``fig:convergence_monitoring``).

The trajectories they replay are read once per analysis (:func:`trajectories_of`,
:mod:`sst_interp.analyses.depth_trajectories`); the replay itself is :mod:`sst_interp.analyses.depth_replay`.
"""

from __future__ import annotations

from typing import Any

from sst_interp.analyses import sections, tidy
from sst_interp.analyses.depth_agreement import AgreementResult, convergence_agreement
from sst_interp.analyses.depth_pareto import ParetoResult, pareto
from sst_interp.analyses.depth_positions import PolicyPositions, iteration_histogram, policy_positions
from sst_interp.analyses.depth_replay import median_policies
from sst_interp.analyses.depth_trajectories import Trajectories, collect_trajectories
from sst_interp.analyses.figure_data import FigureData
from sst_interp.analyses.loop_manifest import replay_reason
from sst_interp.analyses.measurement import Measurement, figure_main
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.results import NotApplicable


def trajectories_of(analysis: Any) -> Trajectories:
    """:func:`collect_trajectories` of a RunAnalysis' run, read once per analysis (the Pareto rows, the histogram
    and the agreement share it)."""
    return analysis._once("depth_trajectories", lambda: collect_trajectories(analysis.run))


def pareto_of(analysis: Any) -> ParetoResult:
    """:func:`pareto` of a RunAnalysis' run, named after its folder."""
    run = analysis.run
    traj = trajectories_of(analysis) if replay_reason(run) is None else None
    return pareto(run, run.path.name, traj=traj)


def positions_of(analysis: Any) -> PolicyPositions | NotApplicable:
    """The median-threshold policies' positions of a RunAnalysis' run (regimes at its GMM crossover)."""
    reason = replay_reason(analysis.run)
    if reason is not None:
        return NotApplicable(reason, "depth_policy_positions")
    traj = trajectories_of(analysis)
    try:
        labels = analysis.regime_labels()
    except UsageError:
        labels = None  # no hidden-state overlaps to label: every position is "unlabelled"
    return policy_positions(traj, median_policies(traj), labels)


def histogram_figure(analysis: Any) -> Any:
    """FigureData for the iterations-per-position histogram: frame ``histogram`` (:func:`iteration_histogram`)."""
    pp = analysis._once("depth_policy_positions", lambda: positions_of(analysis))
    if isinstance(pp, NotApplicable):
        return pp
    hist = iteration_histogram(pp)
    if hist.empty:
        return NotApplicable("no position has recorded values for any rule", "fig_depth_policy_histogram")
    threshold, origin = analysis.threshold
    return FigureData({"histogram": hist}, {"depth": pp.depth, "gmm_threshold": threshold,
                                            "threshold_origin": origin})


def agreement(analysis: Any) -> AgreementResult | NotApplicable:
    """:class:`AgreementResult` of a RunAnalysis' run."""
    pp = analysis._once("depth_policy_positions", lambda: positions_of(analysis))
    if isinstance(pp, NotApplicable):
        return pp
    frame = convergence_agreement(pp)
    if frame.empty or not (frame["positions"] > 0).any():
        return NotApplicable("no position has both a rule decision and recorded hidden states",
                             "tab_depth_policy_convergence")
    return AgreementResult(frame, pp.l2_threshold, pp.layer, pp.depth)


# Issue 23: accuracy against compute, where the rules stop.
def _replayable(a: Any) -> str | None:
    # Replaying halting rules needs a fixed-depth run with per-iteration logits and a rule it can read.
    return replay_reason(a.run)


#: This family's declarative requirement (beside :data:`sst_interp.analyses.measurement.REQUIREMENTS`).
REQUIREMENTS = {"replayable": _replayable}


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
    result = a.attempt("tab_depth_pareto")
    if isinstance(result, NotApplicable):
        return result
    return FigureData({"points": result.table()}, {"notes": list(result.notes)})


def _agreement_notes(a: Any, r: Any) -> list[str]:
    return [f"convergence point: the first iteration >= 2 whose L2 change of layer {r.layer}'s state is below "
            f"{r.l2_threshold:.4g} (the median change of the run), else {r.depth}",
            "decisions read on the recorded full-depth trajectory (every position's own iterations), not on a live "
            "policy run"]


MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(name="depth_pareto", label="", title="Accuracy against mean iterations per generated token: flat "
                "depths, staged capacity, per-position policies (live, or simulated on a fixed-depth run).",
                requires=("comparison",), compute=pareto_of, tidy=lambda r: tidy.renamed(r.table(), {}),
                columns=PARETO_DOC, notes=lambda a, r: list(r.notes)),
    Measurement(name="depth_pareto_front", label="", title="Accuracy against iterations per token (the Pareto table "
                "drawn).", requires=("comparison",), compute=_pareto_figure, tidy=figure_main, columns=PARETO_DOC,
                kind="figure"),
    Measurement(name="depth_policy_histogram", label="", title="Iterations per position where each rule stops, "
                "low-overlap positions against the rest.", requires=("iterations", "replayable"),
                compute=histogram_figure, tidy=figure_main, columns=HISTOGRAM_DOC, kind="figure",
                family=sections.PER_POSITION_DEPTH, figure="policy_histogram", caption="Where each rule, at the median "
                "of its recorded values, stops on the full-depth trajectory: low-overlap (basin-shift) positions "
                "against the rest."),
    Measurement(name="depth_policy_convergence", label="", title="Where each rule stops against where L2 convergence "
                "monitoring says the state converged.", requires=("iterations", "replayable"), compute=agreement,
                tidy=lambda r: tidy.renamed(r.table(), {}), columns=AGREEMENT_DOC, notes=_agreement_notes,
                family=sections.PER_POSITION_DEPTH, caption="Each rule's stopping iteration against the L2 convergence "
                "point of the state (the first iteration whose change is below the run's median change): agreement, "
                "Cohen's kappa, Spearman."),
)
