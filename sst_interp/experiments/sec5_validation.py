"""The paper's Sec. 5 measurement families checked against an organism's known mechanism.

Each row runs the suite's own measurement (through :func:`sst_interp.study.open`, as a user would) on an organism run
and scores it against what the task says each iteration does. The task's truth enters through one predicate,
:class:`Mechanism`: whether a question of ``h`` hops is **still being computed** at the answer column between
iterations ``i`` and ``i + 1``. For ``hops-organism`` (sequential lookups, two per H-cycle) that is ``h > 2 i``; for
an organism that keeps advancing its pointer past the answer (overthinking) it is true at every iteration.

Rows (paper Sec. 5, "Logit dynamics" (4)-(8), and the precision paragraph of Sec. 5.1):

- :func:`causal_ordering_row`: low overlap at or before the first argmax divergence between depths, never after
  (tab:causal_ordering), and the diverging questions are those still being computed after iteration 1;
- :func:`reorganisation_row`: the two regimes of posterior reorganisation (tab:reorg_lo_argmax, tab:reorg_st_argmax):
  a low-overlap argmax change replaces more of the top-100 than a stable one;
- :func:`later_iterations_row`: later-iteration logit dynamics (tab:later_iter_computation): basin-shift logits keep
  their direction (cumulative ratio above 1), and the argmax changes of later transitions fall on questions still
  being computed there;
- :func:`convergent_row`: convergent reasoning (tab:convergent_reasoning): a one-token answer cannot take four
  distinct paths, so the measurement must find none;
- :func:`precision_row`: the precision test (tab:precision_proof): every between-iteration change exceeds the
  recorded dtype's rounding.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import pandas as pd

from sst_interp.analyses.hops import lens_by_hop
from sst_interp.experiments.validation_row import ValidationRow
from sst_interp.store import Run


class Measured(Protocol):
    """What the rows read: :func:`sst_interp.study.open`'s object (a floor above, so it is passed in, not imported)."""

    run: Run

    def data(self, key: str) -> pd.DataFrame:
        """A measurement as tidy data."""


@dataclass(frozen=True)
class Mechanism:
    """What an organism's task says about its iterations.

    Args:
        name: how the rows name it (e.g. "sequential lookups, two per H-cycle").
        still_computing: ``(question, iteration) -> bool``: whether the question (its truth: ``hops``, and for
            counted hops ``beyond``, the bindings its chain runs past the answer) is still being computed at the
            answer column between iteration ``iteration`` and ``iteration + 1``.
        rule: the predicate in words (e.g. "h > 2 i").
    """

    name: str
    still_computing: Callable[[pd.Series, int], bool]
    rule: str


#: hops-organism: iteration i has read 2 i bindings (the L and the H block), so an h-hop chain is finished after
#: ceil(h / 2) iterations.
SEQUENTIAL = Mechanism("sequential lookups, two per H-cycle", lambda truth, i: truth["hops"] > 2 * i, "h > 2 i")
#: hops-overthink: the same lookups, trained only up to each question's sufficient depth ceil(k/2), so the pointer
#: keeps advancing after it wherever the chain runs on past the answer (beyond > 0).
OVERSHOOT = Mechanism("lookups that keep advancing past the count where the chain runs on",
                      lambda truth, i: truth["hops"] > 2 * i or truth["beyond"] > 0, "k > 2 i, or the chain runs on")


def mechanism_truth(run: Run) -> pd.DataFrame:
    """question_id -> ``hops`` and, for counted hops, ``beyond`` (0 where the questions have none)."""
    metadata = run.questions().set_index("question_id")["metadata"].map(json.loads)
    return pd.DataFrame({"hops": metadata.map(lambda m: int(m["hops"])),
                         "beyond": metadata.map(lambda m: int(m.get("beyond", 0)))})


def _value(table: pd.DataFrame, quantity: str, statistic: str = "value", **where: str) -> float:
    """One number of a tidy measurement table (``quantity``, ``statistic`` and any column filters)."""
    rows = table[(table["quantity"] == quantity) & (table["statistic"] == statistic)]
    for column, value in where.items():
        rows = rows[rows[column] == value]
    if len(rows) != 1:
        raise KeyError(f"{quantity}/{statistic} {where}: {len(rows)} rows")
    return float(rows["value"].iloc[0])


def _answers_by_depth(run) -> pd.DataFrame:
    """[question, depth] the first generated token id of the first turn."""
    generations = run.generations()
    generations = generations[generations["turn"] == 0]
    first = generations["token_ids"].map(lambda ids: int(ids[0]) if len(ids) else -1)
    return pd.DataFrame({"question_id": generations["question_id"], "depth": generations["depth"],
                         "first": first}).pivot(index="question_id", columns="depth", values="first")


def causal_ordering_row(analysis: Measured, mechanism: Mechanism = SEQUENTIAL) -> ValidationRow:
    """tab:causal_ordering on the run, and which questions' answers diverge between depths.

    Args:
        analysis: :func:`sst_interp.study.open` of an organism run recorded at depths 1..D.
        mechanism: the organism's :class:`Mechanism`.
    """
    table = analysis.data("causal_ordering").set_index("category")["n_questions"]
    exceptions = int(table["exceptions_argmax_flip_before_low_overlap"])
    answers = _answers_by_depth(analysis.run)
    diverging = answers.index[answers.nunique(axis=1) > 1]
    truth = mechanism_truth(analysis.run)
    computing = [bool(mechanism.still_computing(truth.loc[q], 1)) for q in diverging]
    share = sum(computing) / len(computing) if computing else float("nan")
    detail = table.rename("questions").reset_index()
    return ValidationRow(
        "causal ordering: low overlap against the first argmax divergence between depths (tab:causal_ordering)",
        f"low overlap at or before the first divergence, never after; the diverging questions are those still "
        f"computed after iteration 1 ({mechanism.rule} at i = 1)",
        f"exceptions (argmax flip before low overlap) {exceptions} of {int(table.sum())} questions; "
        f"simultaneous {int(table['simultaneous_low_overlap_argmax_flip_at_the_same_position'])}; "
        f"{len(diverging)} questions answer differently at some depth, {share:.3f} of them still computed after "
        "iteration 1",
        bool(exceptions == 0 and share >= 0.9), detail)


def reorganisation_row(analysis: Measured) -> ValidationRow:
    """The two regimes of posterior reorganisation within a run (tab:reorg_lo_argmax against tab:reorg_st_argmax):
    top-100 tokens replaced where the argmax changes between iterations, at low-overlap against stable positions."""
    low, stable = analysis.data("reorg_lo_argmax"), analysis.data("reorg_st_argmax")
    cells = {}
    for name, table in (("low_overlap", low), ("stable", stable)):
        cells[name] = {quantity: _value(table, quantity, comparison="within") for quantity in (
            "records", "tokens_replaced_median", "new_winner_original_rank_max")}
    p = _value(low, "tokens_replaced_mann_whitney_p_low_vs_stable", comparison="within")
    detail = pd.DataFrame(cells).T.rename_axis("regime").reset_index().assign(mann_whitney_p=p)
    lo, st = cells["low_overlap"], cells["stable"]
    return ValidationRow(
        "posterior reorganisation in two regimes, within a run (tab:reorg_lo_argmax, tab:reorg_st_argmax)",
        "where a hop is read between iterations (low overlap) an argmax change restructures the posterior; where "
        "the state is stable it swaps frontrunners: more of the top-100 replaced in the low regime",
        f"top-100 tokens replaced, median {lo['tokens_replaced_median']:.1f} ({lo['records']:.0f} low-overlap "
        f"argmax changes) against {st['tokens_replaced_median']:.1f} ({st['records']:.0f} stable), Mann-Whitney p "
        f"{p:.1g}; the new winner's original rank at most {lo['new_winner_original_rank_max']:.0f} and "
        f"{st['new_winner_original_rank_max']:.0f}",
        bool(lo["tokens_replaced_median"] > st["tokens_replaced_median"] and p < 0.01), detail)


def later_iterations_row(analysis: Measured, mechanism: Mechanism = SEQUENTIAL) -> ValidationRow:
    """Later-iteration logit dynamics (tab:later_iter_computation) and where the later argmax changes fall.

    Within the deepest run, the answer position's argmax at iteration ``i`` against ``i + 1`` for ``i >= 2``: each
    change is scored against ``mechanism.still_computing(h, i)``."""
    table = analysis.data("later_iter_computation")
    basin = _value(table, "cumulative_ratio_mean", regime="basin_shift")
    basin_low = _value(table, "cumulative_ratio_mean", "ci_low", regime="basin_shift")
    stable = _value(table, "cumulative_ratio_mean", regime="stable")
    depth = max(analysis.run.depths)
    lens = lens_by_hop(analysis.run, depth).sort_values(["question_id", "iteration"])
    lens["next_top"] = lens.groupby("question_id")["top_token"].shift(-1)
    later = lens[(lens["iteration"] >= 2) & lens["next_top"].notna()]
    changes = later[later["top_token"] != later["next_top"]]
    truth = mechanism_truth(analysis.run)
    expected = [bool(mechanism.still_computing(truth.loc[r.question_id], int(r.iteration)))
                for r in changes.itertuples()]
    share = sum(expected) / len(expected) if expected else float("nan")
    detail = changes.assign(still_computing=expected)[["question_id", "hops", "iteration", "top_token", "next_top",
                                                       "still_computing"]]
    return ValidationRow(
        "later-iteration logit dynamics (tab:later_iter_computation) and later argmax changes",
        f"later iterations do work only where hops remain: basin-shift logits keep their direction (cumulative "
        f"ratio above 1), and argmax changes after iteration 2 fall on questions still computed there "
        f"({mechanism.rule})",
        f"cumulative ratio {basin:.2f} (95% CI low {basin_low:.2f}) at basin shifts, {stable:.2f} at stable "
        f"positions; {len(changes)} argmax changes at transitions from iteration 2 on, {share:.3f} of them on "
        "questions still computed there",
        bool(basin_low > 1 and (not expected or share >= 0.8)), detail)


def convergent_row(analysis: Measured) -> ValidationRow:
    """Convergent reasoning (tab:convergent_reasoning) on a one-token task: four depths that all answer right give
    one trace, so the measurement must count no question with four distinct traces."""
    table = analysis.data("convergent_reasoning")
    depths = len(analysis.run.depths)
    all_correct = _value(table, f"questions_correct_at_all_{depths}_depths")
    convergent = _value(table, f"with_{depths}_pairwise_distinct_text_traces_convergent_reasoning")
    return ValidationRow(
        "convergent reasoning (tab:convergent_reasoning)",
        "none: a one-token answer cannot reach the right answer by distinct paths at every depth, so every question "
        "right at all depths is deterministic repetition (the row checks that the measurement invents no "
        "convergence)",
        f"{convergent:.0f} convergent of {all_correct:.0f} questions right at all {depths} depths",
        bool(convergent == 0), table)


def precision_row(analysis: Measured) -> ValidationRow:
    """The precision test (tab:precision_proof): per layer, the fraction of per-dimension between-iteration changes
    above the recorded dtype's rounding."""
    table = analysis.data("precision_proof")
    layers = table[table["layer"] != "all"]
    lowest = float(layers["fraction_above_1"].min())
    pooled = table[table["layer"] == "all"].iloc[0]
    return ValidationRow(
        "precision test: between-iteration changes against the dtype's rounding (tab:precision_proof)",
        "iterations compute on genuinely different inputs: nearly every per-dimension change is above rounding "
        "(fraction above 1 at least 0.9 at every layer)",
        f"median delta-to-precision ratio {float(pooled['median']):.3g} over {int(pooled['n_values'])} values; "
        f"fraction above 1 at least {lowest:.3f} at every layer",
        bool(lowest >= 0.9), table)


#: the rows' names (their CSV files), in :func:`sec5_rows`' order
SEC5_ROWS = ("causal_ordering", "reorganisation", "later_iterations", "convergent", "precision")


def sec5_rows(analysis: Measured, mechanism: Mechanism = SEQUENTIAL) -> list[ValidationRow]:
    """Every Sec. 5 row, in the paper's order."""
    return [causal_ordering_row(analysis, mechanism), reorganisation_row(analysis),
            later_iterations_row(analysis, mechanism), convergent_row(analysis), precision_row(analysis)]
