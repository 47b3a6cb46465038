"""Convergent reasoning across iteration depths (sec:logit_dynamics (8), tab:convergent_reasoning).

A question shows convergent reasoning when it is correct at every recorded depth *and* the text
traces of the depths are pairwise distinct (so the agreement is not deterministic repetition).
The observed rate (convergent questions / all questions) is tested against the chance of ``D``
independent random answers on an ``n_options`` multiple-choice question, ``(1/n_options)**D``, with an
exact one-sided binomial test and a bootstrap interval (the paper's, 10,000 resamples). ``n_options`` is the
number of choices the run's questions have (GPQA: 4). Free-form questions ("7 + 7 =") have no number of options
and so no chance of a random guess: the table then has no chance rows and no binomial test, and a note says why
(issue 44: a four-option rate used to be applied to them). The footnote's chi-square compares the
all-correct count with the count expected if correctness were independent across depths
(``N * prod_d accuracy_d``).

A question's trace at a depth is the text of all its turns at that depth, joined in turn order;
its correctness is that of its last turn (as in :mod:`sst_interp.kernels.outcomes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.analyses import sections
from sst_interp.analyses.measurement import QUANTITY_DOC, Measurement, quantities
from sst_interp.kernels import stats
from sst_interp.analyses.evaluation import load_generations
from sst_interp.kernels.results import AnalysisResult, NotApplicable, depth_matrix_check
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.outcomes import correctness_matrix

TURN_SEPARATOR = "\n\x1e\n"  # record separator between turns of one trace


def unique_trace_counts(generations: Any) -> pd.Series:
    """Number of distinct text traces across depths per question (index ``question_id``).

    Only questions recorded at every depth are counted; the trace of a depth is its turns' texts
    joined in turn order.
    """
    df = load_generations(generations)
    if "text" not in df.columns:
        raise UsageError("generations table lacks the text column needed to compare traces")
    keep = correctness_matrix(df).index
    df = df[df["question_id"].isin(keep)].sort_values(["question_id", "depth", "turn"], kind="stable")
    traces = df.groupby(["question_id", "depth"], sort=False)["text"].agg(
        lambda texts: TURN_SEPARATOR.join("" if t is None else str(t) for t in texts)
    )
    counts = traces.groupby(level="question_id", sort=False).nunique()
    return counts.reindex(keep)


@dataclass(frozen=True)
class ConvergentReasoning(AnalysisResult):
    """tab:convergent_reasoning.

    Args:
        n: questions recorded at every depth.
        depths: the depths compared.
        n_options: answer options per question (chance of a random correct answer = 1/n_options); None when the
            questions have no fixed number of choices (free-form, or mixed): no chance baseline then.
        no_chance: why there is no chance baseline ("" when there is one).
        all_correct: questions correct at every depth.
        unique_counts: among those, how many have k distinct traces, as ``{k: count}``.
        convergent: all-correct questions with pairwise distinct traces (k = number of depths).
        rate_ci: bootstrap interval of ``convergent / n``.
        binomial: one-sided exact binomial test of ``convergent`` of ``n`` at the chance probability; None without
            a chance baseline.
        accuracies: per-depth accuracy, in depth order.
        independence: chi-square of the all-correct count against independence across depths,
            or None when it is undefined (a depth with accuracy 0 or 1).
    """

    label = "tab:convergent_reasoning"
    n: int
    depths: tuple[int, ...]
    n_options: int | None
    all_correct: int
    unique_counts: dict[int, int]
    convergent: int
    rate_ci: stats.Interval
    binomial: stats.TestResult | None
    accuracies: tuple[float, ...]
    independence: stats.TestResult | None
    no_chance: str = ""

    @property
    def chance(self) -> float:
        """Chance probability that all depths answer correctly: ``(1/n_options)**len(depths)``; NaN without a
        number of options."""
        return float("nan") if self.n_options is None else (1.0 / self.n_options) ** len(self.depths)

    def trace_rows(self) -> list[tuple[str, float]]:
        """The all-correct questions by their number of distinct traces: ``d`` (convergent), ``d - 1`` (one pair
        identical) and ``d - 2`` or fewer (deterministic repetition), each row only where that many can exist:
        with two depths, one trace is the repetition row and there is no "0 or fewer" row."""
        d = len(self.depths)
        rows = [(f"with {d} pairwise distinct text traces (convergent reasoning)", float(self.convergent))]
        if d == 2:
            return rows + [("with 1 unique text trace (deterministic repetition)",
                            float(self.unique_counts.get(1, 0)))]
        fewer = sum(v for k, v in self.unique_counts.items() if k <= d - 2)
        return rows + [(f"with {d - 1} unique text traces (one depth pair identical)",
                        float(self.unique_counts.get(d - 1, 0))),
                       (f"with {d - 2} or fewer unique text traces (deterministic repetition)"
                        if d > 3 else "with 1 unique text trace (deterministic repetition)", float(fewer))]

    def table(self) -> pd.DataFrame:
        """Rows as in the paper: counts, observed rate with CI, chance baseline, ratio, tests."""
        d = len(self.depths)
        rate = self.convergent / self.n
        rows: list[tuple[str, float]] = [
            (f"questions correct at all {d} depths", self.all_correct),
            *self.trace_rows(),
            ("questions (N)", self.n),
            ("observed convergent-reasoning rate (%)", 100.0 * rate),
            ("bootstrap 95% CI low (%)", 100.0 * self.rate_ci.low),
            ("bootstrap 95% CI high (%)", 100.0 * self.rate_ci.high),
        ]
        if self.n_options is not None and self.binomial is not None:
            rows += [
                (f"chance baseline (1/{self.n_options})^{d} (%)", 100.0 * self.chance),
                ("null expected count", self.n * self.chance),
                ("observed / chance ratio", rate / self.chance),
                ("binomial exact test p (one-sided greater)", self.binomial.pvalue),
            ]
        if self.independence is not None:
            expected = self.n * float(np.prod(self.accuracies))
            rows += [
                ("all-correct expected under independence across depths", expected),
                ("chi-square vs independence", self.independence.statistic),
                ("chi-square vs independence p", self.independence.pvalue),
            ]
        return pd.DataFrame(rows, columns=["quantity", "value"])


def options_of(source: Any) -> tuple[int | None, str]:
    """(the number of choices every question of ``source`` has, "") or (None, why there is none): the questions are
    free-form, have different numbers of choices, or ``source`` (a bare generations table) does not say."""
    if not hasattr(source, "questions"):
        return None, ("the generations table does not say how many choices the questions have; pass n_options "
                      "for a chance baseline")
    questions = source.questions()
    lists = [c for c in questions["choices"]] if "choices" in questions.columns else []
    sizes = {len(c) for c in lists if c is not None and len(c) > 0}
    if not sizes:
        return None, ("the questions are free-form (no answer choices): a random guess has no fixed chance of being "
                      "right, so there is no chance baseline")
    if len(sizes) > 1 or any(c is None or len(c) == 0 for c in lists):
        counts = sorted(sizes) + ([0] if any(c is None or len(c) == 0 for c in lists) else [])
        return None, (f"the questions have different numbers of choices ({', '.join(map(str, counts))}): no one "
                      "chance rate fits them all")
    return sizes.pop(), ""


def convergent_reasoning(
    run: Any, n_options: int | None = None, n_resamples: int = 10_000, seed: int = stats.DEFAULT_SEED
) -> ConvergentReasoning | NotApplicable:
    """tab:convergent_reasoning from a run (or generations table) with two or more depths.

    ``n_options`` defaults to the number of choices of the run's questions when they all have the
    same number (GPQA: 4); without one (free-form questions, mixed numbers, a bare generations table) the
    result has no chance baseline and says why (:attr:`ConvergentReasoning.no_chance`).
    """
    matrix = correctness_matrix(run)
    refused = depth_matrix_check(matrix, ConvergentReasoning.label, "convergence needs two or more")
    if refused is not None:
        return refused
    no_chance = ""
    if n_options is None:
        n_options, no_chance = options_of(run)
    if n_options is not None and n_options < 2:
        raise UsageError(f"n_options must be at least 2, got {n_options}")
    values = matrix.to_numpy(bool)
    depths = tuple(int(c) for c in matrix.columns)
    all_ok = values.all(axis=1)
    uniq = unique_trace_counts(run).reindex(matrix.index).to_numpy(int)
    convergent_mask = all_ok & (uniq == len(depths))
    counts = pd.Series(uniq[all_ok]).value_counts().to_dict()
    n = len(matrix)
    k = int(convergent_mask.sum())
    ci = stats.bootstrap_ci(convergent_mask.astype(float), np.mean, n_resamples=n_resamples, seed=seed)
    binom = (None if n_options is None
             else stats.binomial_test(k, n, (1.0 / n_options) ** len(depths), alternative="greater"))
    acc = tuple(float(a) for a in values.mean(axis=0))
    p_ind = float(np.prod(acc))
    independence = None
    if 0.0 < p_ind < 1.0:
        observed = [int(all_ok.sum()), n - int(all_ok.sum())]
        independence = stats.chi2_goodness_of_fit(observed, [n * p_ind, n * (1.0 - p_ind)])
    return ConvergentReasoning(
        n, depths, n_options, int(all_ok.sum()), {int(a): int(b) for a, b in counts.items()}, k, ci, binom, acc,
        independence, no_chance,
    )


def _notes(analysis: Any, result: ConvergentReasoning) -> list[str]:
    if result.no_chance:
        return [f"no chance baseline or binomial test: {result.no_chance}"]
    return [f"chance baseline: {result.n_options} answer options per question (from the run's questions)"]


MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(name="convergent_reasoning", label="tab:convergent_reasoning", title="Questions correct at every depth "
                "with distinct text traces, against chance.", requires=("depths",),
                compute=lambda a: convergent_reasoning(a.run), tidy=quantities("quantity"), columns=QUANTITY_DOC,
                notes=_notes, family=sections.LOGIT_DYNAMICS, caption="Convergent reasoning: questions correct at "
                "every depth with pairwise distinct text traces, against the chance of independent random answers."),
)
