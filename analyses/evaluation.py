"""Accuracy tables of sec:evaluation: main results, staged breakdown, overthinking (McNemar), Sankey flows.

Inputs are generations tables (docs/format.md columns: ``question_id``, ``depth``, ``turn``,
``correct``, ...) or :class:`~sst_interp.store.Run` objects (their ``episodes()`` are read). Sentence repetition
and loops (tab:repetition) are in :mod:`sst_interp.analyses.repetition`.

Definitions (paper sec:evaluation; the outcomes themselves are defined in :mod:`sst_interp.kernels.outcomes`):

- A question's correctness at a depth is its episode's verdict (:func:`~sst_interp.kernels.outcomes.correctness_matrix`).
- Only questions recorded at every depth of the run enter (N is reported).
- Staged compute (sec:capacity, tab:staged_breakdown): questions are tried at depth 1, then 2, ...;
  the capacity through stage ``i`` is the fraction solved at some depth <= ``i``. Under greedy decoding
  the depth-``i`` attempt of the escalation is the flat depth-``i`` generation, so stages are computed
  from the flat runs. (The paper's staged-vs-flat-4 McNemar reports 6 questions correct at flat 4 but
  not under staged compute, which cannot happen under this definition: its staged runs were separate
  evaluations. Here the reverse-discordant count is 0 by construction.)
- Error correction (tab:main_results): (SST - baseline) / (1 - baseline), the fraction of the
  baseline's errors the SST fixes; e.g. 1250/1319 vs 1282/1319 gives 46.38%.
- Overthinking (tab:overthinking): flat depth ``d`` against flat depth 1; regressions = pass at 1, fail
  at ``d``; recoveries = the reverse; McNemar on those discordant counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.analyses import sections, tidy
from sst_interp.analyses.figure_data import FigureData
from sst_interp.analyses.measurement import Measurement, by_computing
from sst_interp.kernels import stats
from sst_interp.kernels.results import AnalysisResult, NotApplicable, depth_matrix_check
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.outcomes import correctness_matrix, outcome_rows, staged_capacity


def load_generations(source: Any) -> pd.DataFrame:
    """The generations table of ``source`` (a DataFrame, or anything with a ``generations()`` method), checked:
    it has the columns correctness needs and no ungraded row."""
    if not isinstance(source, pd.DataFrame) and hasattr(source, "generations"):
        source = source.generations()
    return outcome_rows(source)


def error_correction(baseline_correct: int, sst_correct: int, n: int) -> float:
    """Fraction of the baseline's errors fixed: ``(sst - base) / (1 - base)`` with accuracies ``x / n``.

    Raises UsageError when the baseline makes no error (the quantity is undefined).
    """
    for name, value in (("baseline_correct", baseline_correct), ("sst_correct", sst_correct)):
        if not 0 <= value <= n:
            raise UsageError(f"{name}={value} must lie in 0..n={n}")
    if baseline_correct == n:
        raise UsageError("error correction is undefined when the baseline answers every question correctly")
    return (sst_correct - baseline_correct) / (n - baseline_correct)


def _as_mapping(sources: Any, default_name: str = "run") -> Mapping[str, Any]:
    return sources if isinstance(sources, Mapping) else {default_name: sources}


def _pct(x: float) -> float:
    return 100.0 * float(x)


@dataclass(frozen=True)
class StagedBreakdown(AnalysisResult):
    """tab:staged_breakdown: staged capacity through each stage, per benchmark.

    Args:
        rows: one entry per benchmark: ``(name, n, depths, solved_through_stage)`` where
            ``solved_through_stage[i]`` counts questions solved at some depth <= ``depths[i]``.
    """

    label = "tab:staged_breakdown"
    rows: tuple[tuple[str, int, tuple[int, ...], tuple[int, ...]], ...]

    def table(self) -> pd.DataFrame:
        """One row per benchmark: ``N``, ``stage_<d>`` accuracy (%) per stage, ``capacity`` (%)."""
        out = []
        for name, n, depths, solved in self.rows:
            row: dict[str, Any] = {"benchmark": name, "N": n}
            for depth, count in zip(depths, solved):
                row[f"stage_{depth}"] = _pct(count / n)
            row["capacity"] = _pct(solved[-1] / n)
            out.append(row)
        return pd.DataFrame(out)


def staged_breakdown(runs: Any) -> StagedBreakdown | NotApplicable:
    """Staged compute capacity (tab:staged_breakdown) of one run or a mapping ``{benchmark: run}``."""
    rows = []
    for name, source in _as_mapping(runs).items():
        matrix = correctness_matrix(source)
        refused = depth_matrix_check(matrix, StagedBreakdown.label, "staged compute needs two or more", f"{name}: ")
        if refused is not None:
            return refused
        solved = staged_capacity(matrix)
        rows.append((name, len(matrix), tuple(matrix.columns), tuple(solved.values())))
    return StagedBreakdown(tuple(rows))


@dataclass(frozen=True)
class MainResultRow:
    """One benchmark of tab:main_results.

    Args:
        benchmark: its name.
        n: questions present in both runs.
        baseline_correct: baseline questions correct.
        sst_correct: SST questions correct (staged capacity, or the chosen depth).
        sst_only: questions the SST answers and the baseline misses.
        baseline_only: the reverse.
        mcnemar_p: exact two-sided McNemar p on the discordant pairs (1.0 when there are none).
    """

    benchmark: str
    n: int
    baseline_correct: int
    sst_correct: int
    sst_only: int
    baseline_only: int
    mcnemar_p: float


@dataclass(frozen=True)
class MainResults(AnalysisResult):
    """tab:main_results: baseline vs SST accuracy, the difference and the error correction."""

    label = "tab:main_results"
    rows: tuple[MainResultRow, ...]
    sst_condition: str

    def table(self) -> pd.DataFrame:
        """Columns: benchmark, N, baseline (%), sst (%), delta_pp, error_correction (%), McNemar counts/p."""
        out = []
        for r in self.rows:
            base, sst = r.baseline_correct / r.n, r.sst_correct / r.n
            out.append(
                {
                    "benchmark": r.benchmark,
                    "N": r.n,
                    "baseline": _pct(base),
                    "sst": _pct(sst),
                    "sst_condition": self.sst_condition,
                    "delta_pp": _pct(sst - base),
                    "error_correction": _pct(error_correction(r.baseline_correct, r.sst_correct, r.n)),
                    "sst_only": r.sst_only,
                    "baseline_only": r.baseline_only,
                    "mcnemar_exact_p": r.mcnemar_p,
                }
            )
        return pd.DataFrame(out)


def _sst_vector(matrix: pd.DataFrame, sst_depth: int | None) -> pd.Series:
    if sst_depth is None:
        return matrix.any(axis=1)
    if sst_depth not in matrix.columns:
        raise UsageError(f"depth {sst_depth} is not in the SST run (depths {list(matrix.columns)})")
    return matrix[sst_depth]


def _baseline_vector(matrix: pd.DataFrame, baseline_depth: int | None) -> pd.Series:
    if baseline_depth is None:
        if matrix.shape[1] != 1:
            raise UsageError(
                f"baseline run has depths {list(matrix.columns)}; pass baseline_depth to choose one"
            )
        return matrix.iloc[:, 0]
    if baseline_depth not in matrix.columns:
        raise UsageError(f"depth {baseline_depth} is not in the baseline run (depths {list(matrix.columns)})")
    return matrix[baseline_depth]


def _discordant_p(b: int, c: int) -> float:
    return 1.0 if b + c == 0 else stats.mcnemar_exact(b, c).pvalue


def main_results(
    pairs: Mapping[str, tuple[Any, Any]],
    sst_depth: int | None = None,
    baseline_depth: int | None = None,
) -> MainResults | NotApplicable:
    """tab:main_results from ``{benchmark: (sst_run, baseline_run)}``.

    The SST side is its staged capacity (correct at any recorded depth) unless ``sst_depth`` is
    given; the baseline side is its only depth (or ``baseline_depth``). Questions present in both
    runs enter. A benchmark whose baseline answers everything correctly makes the table
    NotApplicable (error correction is undefined).
    """
    if not isinstance(pairs, Mapping) or not pairs:
        raise UsageError("pass a non-empty mapping {benchmark: (sst_run, baseline_run)}")
    rows = []
    for name, pair in pairs.items():
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise UsageError(f"{name}: expected a (sst_run, baseline_run) pair")
        sst = _sst_vector(correctness_matrix(pair[0]), sst_depth)
        base = _baseline_vector(correctness_matrix(pair[1]), baseline_depth)
        common = [q for q in sst.index if q in base.index]
        if not common:
            return NotApplicable(f"{name}: the SST and baseline runs share no question", MainResults.label)
        s, b = sst.loc[common].to_numpy(bool), base.loc[common].to_numpy(bool)
        if b.all():
            return NotApplicable(
                f"{name}: the baseline answers all {len(common)} questions correctly; error correction is undefined",
                MainResults.label,
            )
        sst_only, base_only = int((s & ~b).sum()), int((b & ~s).sum())
        rows.append(
            MainResultRow(name, len(common), int(b.sum()), int(s.sum()), sst_only, base_only,
                          _discordant_p(sst_only, base_only))
        )
    condition = "staged compute" if sst_depth is None else f"flat depth {sst_depth}"
    return MainResults(tuple(rows), condition)


@dataclass(frozen=True)
class OverthinkingRow:
    """One paired comparison of tab:overthinking: ``condition`` against ``compared_with``.

    Args:
        condition: e.g. ``"flat depth 4"``.
        compared_with: the condition it is paired with, e.g. ``"flat depth 1"``.
        correct: questions correct under ``condition``.
        compared_correct: questions correct under ``compared_with``.
        regressions: pass under ``compared_with``, fail under ``condition``.
        recoveries: fail under ``compared_with``, pass under ``condition``.
    """

    condition: str
    compared_with: str
    correct: int
    compared_correct: int
    regressions: int
    recoveries: int


def _paired(condition: str, compared_with: str, cond: np.ndarray, ref: np.ndarray) -> OverthinkingRow:
    return OverthinkingRow(condition, compared_with, int(cond.sum()), int(ref.sum()),
                           int((ref & ~cond).sum()), int((~ref & cond).sum()))


@dataclass(frozen=True)
class Overthinking(AnalysisResult):
    """tab:overthinking: each condition paired with flat depth 1 (and the deepest flat depth with staged).

    Args:
        n: questions.
        rows: staged compute, the reference depth, each flat depth and the matched baseline (when given),
            each against the reference depth; last, the deepest flat depth against staged compute.
    """

    label = "tab:overthinking"
    n: int
    rows: tuple[OverthinkingRow, ...]

    def table(self) -> pd.DataFrame:
        """Columns: condition, compared_with, accuracy (%), delta_pp, regressions, recoveries, McNemar tests.

        ``mcnemar_*_cc`` are continuity corrected (the paper's 30 vs 14 -> p = 0.024); ``mcnemar_chi2`` /
        ``mcnemar_p`` are not (the paper's 42 vs 6 -> chi2 = 27.0); ``mcnemar_exact_p`` is two-sided exact.
        """
        out = []
        for r in self.rows:
            b, c = r.regressions, r.recoveries
            row: dict[str, Any] = {
                "condition": r.condition, "compared_with": r.compared_with, "accuracy": _pct(r.correct / self.n),
                "delta_pp": _pct((r.correct - r.compared_correct) / self.n), "regressions": b, "recoveries": c,
                "mcnemar_chi2_cc": 0.0, "mcnemar_p_cc": 1.0, "mcnemar_chi2": 0.0, "mcnemar_p": 1.0,
                "mcnemar_exact_p": 1.0,
            }
            if b + c:
                corr, raw = stats.mcnemar_chi2(b, c, correction=True), stats.mcnemar_chi2(b, c, correction=False)
                row.update(mcnemar_chi2_cc=corr.statistic, mcnemar_p_cc=corr.pvalue, mcnemar_chi2=raw.statistic,
                           mcnemar_p=raw.pvalue, mcnemar_exact_p=stats.mcnemar_exact(b, c).pvalue)
            out.append(row)
        return pd.DataFrame(out)


def overthinking(run: Any, baseline: Any | None = None, baseline_depth: int | None = None
                 ) -> Overthinking | NotApplicable:
    """tab:overthinking from a multi-depth run (flat generations at every depth).

    Staged compute, each flat depth and (when given) the matched ``baseline`` on the same questions are
    paired with the smallest depth (regressions, recoveries, McNemar with and without continuity
    correction, exact McNemar); the last row pairs the deepest flat depth with staged compute
    (``regressions`` = staged-correct questions the deepest flat depth misses).
    """
    matrix = correctness_matrix(run)
    refused = depth_matrix_check(matrix, Overthinking.label, "overthinking needs two or more")
    if refused is not None:
        return refused
    values = matrix.to_numpy(bool)
    if (values == values[:, :1]).all():
        return NotApplicable(
            "no question changes pass/fail between depths (e.g. every question correct); nothing to test",
            Overthinking.label,
        )
    depths = list(matrix.columns)
    ref, ref_name = values[:, 0], f"flat depth {depths[0]}"
    staged = values.any(axis=1)
    rows = [_paired("staged compute", ref_name, staged, ref), _paired(ref_name, ref_name, ref, ref)]
    rows += [_paired(f"flat depth {d}", ref_name, values[:, j], ref) for j, d in enumerate(depths[1:], start=1)]
    if baseline is not None:
        base = _baseline_vector(correctness_matrix(baseline), baseline_depth)
        missing = [q for q in matrix.index if q not in base.index]
        if missing:
            raise UsageError(f"baseline run lacks {len(missing)} of the run's questions (e.g. {missing[0]!r})")
        rows.append(_paired("matched baseline", ref_name, base.loc[matrix.index].to_numpy(bool), ref))
    rows.append(_paired(f"flat depth {depths[-1]}", "staged compute", values[:, -1], staged))
    return Overthinking(len(matrix), tuple(rows))


@dataclass(frozen=True)
class SankeyFlows(AnalysisResult):
    """fig:overthinking_sankey data: pass/fail per depth and the four flows between consecutive depths.

    Args:
        n: questions.
        depths: the depths in order.
        passes: questions passing at each depth.
        flows: per consecutive pair, ``(from_depth, to_depth, pass_pass, pass_fail, fail_pass, fail_fail)``.
    """

    label = "fig:overthinking_sankey"
    n: int
    depths: tuple[int, ...]
    passes: tuple[int, ...]
    flows: tuple[tuple[int, int, int, int, int, int], ...]

    def table(self) -> pd.DataFrame:
        """Long format: from_depth, to_depth, from_state, to_state, count (four rows per transition)."""
        out = []
        for d0, d1, pp, pf, fp, ff in self.flows:
            for s0, s1, count in (("pass", "pass", pp), ("pass", "fail", pf), ("fail", "pass", fp), ("fail", "fail", ff)):
                out.append({"from_depth": d0, "to_depth": d1, "from_state": s0, "to_state": s1, "count": count})
        return pd.DataFrame(out)

    def columns_table(self) -> pd.DataFrame:
        """One row per depth column: depth, passes, fails, accuracy (%)."""
        return pd.DataFrame(
            {"depth": self.depths, "passes": self.passes,
             "fails": [self.n - p for p in self.passes],
             "accuracy": [_pct(p / self.n) for p in self.passes]}
        )


def overthinking_sankey(run: Any) -> SankeyFlows | NotApplicable:
    """Per-question pass/fail flows between consecutive flat depths (fig:overthinking_sankey)."""
    matrix = correctness_matrix(run)
    refused = depth_matrix_check(matrix, SankeyFlows.label, "flows need two or more")
    if refused is not None:
        return refused
    v = matrix.to_numpy(bool)
    depths = tuple(int(d) for d in matrix.columns)
    flows = []
    for j in range(len(depths) - 1):
        a, b = v[:, j], v[:, j + 1]
        flows.append((depths[j], depths[j + 1], int((a & b).sum()), int((a & ~b).sum()),
                      int((~a & b).sum()), int((~a & ~b).sum())))
    return SankeyFlows(len(matrix), depths, tuple(int(x) for x in v.sum(axis=0)), tuple(flows))


# ------------------------------------------------------------------------------------------------ figure data
def sankey_figure(analysis: Any) -> FigureData | NotApplicable:
    """fig:overthinking_sankey: pass/fail columns and the four flows of each transition."""
    result = overthinking_sankey(analysis.run)
    if isinstance(result, NotApplicable):
        return result
    return FigureData({"flows": result.table(), "columns": result.columns_table()}, {"n": result.n}, "flows")


# ------------------------------------------------------------------------------------------------ entries
def _overthinking(a: Any) -> Any:
    return overthinking(a.run, a.baseline, a.baseline_depth)


def _overthinking_notes(a: Any, result: Any) -> list[str]:
    return [] if a.baseline is not None else ["no --baseline run given: the matched-baseline reference row is "
                                              "omitted"]


#: The evaluation's measurements (sec:evaluation), in the report's order.
MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(name="staged_breakdown", label="tab:staged_breakdown", title="Staged compute capacity: questions "
                "solved at some depth up to each stage.", requires=("depths",),
                compute=lambda a: staged_breakdown({a.name: a.run}), tidy=lambda r: tidy.stages(r.table()),
                columns={"benchmark": "the run's benchmark", "n_questions": "questions", "stage": "the deepest depth "
                         "allowed", "cumulative_accuracy_pct": "questions solved at some depth <= stage, percent"}),
    Measurement(name="main_results", label="tab:main_results", title="Matched baseline vs SST at staged compute.",
                requires=("baseline",),
                compute=lambda a: main_results({a.name: (a.run, a.baseline)}, baseline_depth=a.baseline_depth),
                tidy=lambda r: tidy.renamed(r.table(), {"N": "n_questions", "baseline": "baseline_accuracy_pct",
                                                        "sst": "sst_accuracy_pct", "error_correction":
                                                        "error_correction_pct"}),
                columns={"benchmark": "benchmark", "n_questions": "questions", "baseline_accuracy_pct": "baseline "
                         "accuracy", "sst_accuracy_pct": "SST accuracy", "sst_condition": "which SST condition",
                         "delta_pp": "difference in percentage points", "error_correction_pct": "(SST - baseline) / "
                         "(100 - baseline)", "sst_only": "questions only the SST solves", "baseline_only": "questions "
                         "only the baseline solves", "mcnemar_exact_p": "exact McNemar p"}),
    Measurement(name="overthinking", label="tab:overthinking", title="Staged compute and each flat depth against "
                "the shallowest depth: regressions, recoveries, McNemar tests.", requires=("depths",),
                compute=_overthinking, tidy=lambda r: tidy.renamed(r.table(), {"accuracy": "accuracy_pct"}),
                columns={"condition": "staged compute, flat depth d or the baseline", "compared_with": "the reference",
                         "accuracy_pct": "accuracy", "delta_pp": "accuracy minus the reference's, points",
                         "regressions": "questions right in the reference, wrong here", "recoveries": "the reverse",
                         "mcnemar_chi2_cc": "McNemar chi2, continuity corrected", "mcnemar_p_cc": "its p",
                         "mcnemar_chi2": "McNemar chi2", "mcnemar_p": "its p", "mcnemar_exact_p": "exact McNemar p"},
                notes=_overthinking_notes,
                # what the manifest cannot tell (a question whose pass/fail changes between depths) is found by
                # computing it (cheap: the correctness matrix), so available() never lists it where data() refuses
                found=by_computing("overthinking"),
                family=sections.EVALUATION, inputs=("run", "baseline"), caption="Overthinking regression: accuracy "
                "of staged compute and of each flat depth, each paired with the shallowest depth (regressions, "
                "recoveries, McNemar tests)."),
    Measurement(name="overthinking_sankey", label="fig:overthinking_sankey", title="Pass/fail flows between "
                "consecutive flat depths.", requires=("depths",), compute=sankey_figure,
                tidy=lambda r: tidy.renamed(r.table(), {}),
                columns={"from_depth": "depth", "to_depth": "next depth", "from_state": "pass or fail",
                         "to_state": "pass or fail", "count": "questions"}, kind="figure", family=sections.EVALUATION,
                figure="sankey", caption="Per-question pass/fail flows between consecutive flat depths: ribbons "
                "pass->pass, pass->fail (regression), fail->pass (recovery), fail->fail; accuracy above each column."),
)
