"""One entry point for notebooks: ``analyses.open(run)`` -> :class:`RunAnalysis`.

::

    from sst_interp import analyses
    a = analyses.open("runs/demo")                 # a path or a Run; baseline= optional (a path or a Run)
    a.available()                                   # what this run supports, and why not the rest
    a.gmm_threshold                                 # the run's low-overlap threshold (app:gmm)
    a.staged_breakdown()                            # tab:staged_breakdown as a DataFrame
    a.argmax_concentration()                        # tab:argmax_concentration

The expensive shared steps (punctuated equilibrium and its GMM threshold, regime labels at that threshold, the
per-iteration logit comparison records, convergence monitoring) are computed at most once per object. Every
measurement method is named after the paper label it reproduces and returns a tidy DataFrame (the table the report
writes); a measurement the run cannot support raises :class:`NotAvailable` with the reason. The report builds its
artefacts from these same objects (:class:`sst_interp.reporting.context.ReportContext`), so no step of the chain
run -> threshold -> labels -> records lives only in the report.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from sst_interp.analyses import convergent, episodes, evaluation, repetition
from sst_interp.analyses import logit_dynamics as ld
from sst_interp.analyses.basin_profiles import punctuated_equilibrium
from sst_interp.analyses.basins import GMMFit
from sst_interp.analyses.convergence import convergence_monitoring
from sst_interp.analyses.precision import precision_proof
from sst_interp.analyses.results import NotApplicable
from sst_interp.errors import UsageError
from sst_interp.outcomes import correctness_matrix
from sst_interp.store import Run


class NotAvailable(UsageError):
    """A measurement this run cannot support; the message says why (e.g. a single depth, no baseline)."""


def as_run(source: str | Path | Run) -> Run:
    """A :class:`~sst_interp.store.Run` from a run directory path or a Run."""
    if isinstance(source, Run):
        return source
    if isinstance(source, (str, Path)):
        return Run.open(source)
    raise UsageError(f"expected a run directory path or a Run, got {type(source).__name__}")


def _frame(result: Any) -> pd.DataFrame:
    if isinstance(result, NotApplicable):
        raise NotAvailable(f"{result.measurement}: {result.reason}" if result.measurement else result.reason)
    return result.table() if hasattr(result, "table") else result


class RunAnalysis:
    """The paper's measurements of one run, with the shared steps computed once.

    Args:
        run: the run (a path or a :class:`~sst_interp.store.Run`).
        baseline: the matched baseline run (a path or a Run), for tab:main_results and the baseline rows of
            tab:overthinking and tab:repetition; optional.
        baseline_depth: the baseline's depth (default: its only, or shallowest, depth).
        name: the benchmark name used in multi-benchmark tables (default: the manifest's ``questions``).
    """

    def __init__(self, run: str | Path | Run, baseline: str | Path | Run | None = None,
                 baseline_depth: int | None = None, name: str | None = None) -> None:
        self.run = as_run(run)
        self.baseline = as_run(baseline) if baseline is not None else None
        self.baseline_depth = baseline_depth if baseline_depth is not None or self.baseline is None else min(
            self.baseline.depths)
        self.name = name or str(self.run.manifest.get("questions") or self.run.path.name)
        self._memo: dict[str, Any] = {}

    def _once(self, key: str, build: Callable[[], Any]) -> Any:
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    def __repr__(self) -> str:
        base = f", baseline={self.baseline.path}" if self.baseline is not None else ""
        return f"RunAnalysis({self.run.path}, depths={self.run.depths}{base})"

    # ------------------------------------------------------------------------------------ shared steps
    @property
    def punctuated(self) -> Any:
        """:func:`~sst_interp.analyses.basin_profiles.punctuated_equilibrium` (a NotApplicable when unsupported)."""
        return self._once("pe", lambda: punctuated_equilibrium(self.run))

    @property
    def threshold(self) -> tuple[float, str]:
        """(low-overlap threshold, where it came from): the run's GMM crossover, else the paper's."""
        gmm = getattr(self.punctuated, "gmm", None)
        if isinstance(gmm, GMMFit):
            return float(gmm.threshold), "this run's GMM crossover"
        return float(ld.PAPER_THRESHOLD), "the paper's GMM crossover (this run has no fit)"

    @property
    def gmm_threshold(self) -> float:
        """The low-overlap threshold the regime labels use (app:gmm)."""
        return self.threshold[0]

    def regime_labels(self) -> pd.DataFrame:
        """Low-overlap / stable label per compared iteration pair and position, at :attr:`gmm_threshold`."""
        return self._once("labels", lambda: ld.labels_from_run(self.run, threshold=self.gmm_threshold))

    def logit_records(self) -> Any:
        """:class:`~sst_interp.analyses.logit_dynamics.LogitRecords` (window: the run's full positions; top-n:
        min(100, the run's top-K), so a run recorded with top-K below 100 works)."""
        top_k = int(self.run.manifest.get("top_k") or 100)
        window = int(self.run.manifest.get("full_positions") or 10)
        return self._once("records", lambda: ld.collect_records(
            self.run, self.regime_labels(), max_positions=window, top_n=min(100, top_k)))

    def convergence(self) -> Any:
        """:func:`~sst_interp.analyses.convergence.convergence_monitoring` (a NotApplicable when unsupported)."""
        return self._once("convergence", lambda: convergence_monitoring(self.run))

    def _fixed_depth(self, label: str) -> None:
        """Refuse a run recorded under a per-position depth policy: its positions ran different numbers of
        iterations (generations ``iterations``), and ``label`` compares iterations of positions at one depth."""
        policy = str(self.run.manifest.get("depth_policy", "fixed"))
        if policy != "fixed" and not policy.startswith("probe:"):
            raise NotAvailable(f"{label}: the run used the per-position depth policy {policy}, so its positions ran "
                               f"different numbers of iterations; this measurement compares iterations at a fixed "
                               f"depth (record with --depth-policy fixed)")

    def _iterations(self, label: str) -> None:
        self._fixed_depth(label)
        if max(self.run.depths, default=0) < 2:
            raise NotAvailable(f"{label}: run has depths {self.run.depths}; comparing iterations needs a depth >= 2")

    def _pe_part(self, attr: str) -> pd.DataFrame:
        self._fixed_depth("sec:punctuated_equilibrium")
        pe = self.punctuated
        return _frame(pe if isinstance(pe, NotApplicable) else getattr(pe, attr))

    # ------------------------------------------------------------------------------------ evaluation
    def correctness(self) -> pd.DataFrame:
        """[questions, depths] bool: each question's episode verdict at each flat depth."""
        return correctness_matrix(self.run)

    def staged_breakdown(self) -> pd.DataFrame:
        """tab:staged_breakdown."""
        return _frame(evaluation.staged_breakdown({self.name: self.run}))

    def main_results(self) -> pd.DataFrame:
        """tab:main_results (needs ``baseline``)."""
        if self.baseline is None:
            raise NotAvailable("tab:main_results compares the SST with its matched baseline: pass baseline=")
        return _frame(evaluation.main_results({self.name: (self.run, self.baseline)},
                                              baseline_depth=self.baseline_depth))

    def overthinking(self) -> pd.DataFrame:
        """tab:overthinking (with the baseline's reference row when a baseline is given)."""
        return _frame(evaluation.overthinking(self.run, self.baseline, self.baseline_depth))

    def repetition(self) -> pd.DataFrame:
        """tab:repetition: flat shallowest / staged / flat deepest (and the baseline), per model turn, averaged."""
        gens = self.run.generations()
        depths = sorted(self.run.depths)
        configs: dict[str, pd.DataFrame] = {}
        if self.baseline is not None:
            configs[f"Baseline iter={self.baseline_depth}"] = repetition.select_depth(self.baseline.generations(),
                                                                                      self.baseline_depth)
        configs[f"SST flat iter={depths[0]}"] = repetition.select_depth(gens, depths[0])
        if len(depths) >= 2:
            configs["SST staged"] = repetition.select_staged(gens)
            configs[f"SST flat iter={depths[-1]}"] = repetition.select_depth(gens, depths[-1])
        return _frame(repetition.repetition(configs, reference=next(iter(configs))))

    def convergent_reasoning(self) -> pd.DataFrame:
        """tab:convergent_reasoning."""
        return _frame(convergent.convergent_reasoning(self.run))

    def episode_conduct(self) -> pd.DataFrame:
        """CodeACT runs: per depth, the fractions of episodes that act in their first turn, finish, are correct."""
        return _frame(episodes.episode_conduct(self.run))

    # ------------------------------------------------------------------------------------ basins
    def causal_ordering(self) -> pd.DataFrame:
        """tab:causal_ordering."""
        return self._pe_part("causal")

    def pos0_divergence(self) -> pd.DataFrame:
        """tab:pos0_divergence."""
        return self._pe_part("pos0_divergence")

    def basin_summary(self) -> pd.DataFrame:
        """Low-overlap positions per question, per-position rates and gaps (sec:punctuated_equilibrium)."""
        return self._pe_part("summary")

    # ------------------------------------------------------------------------------------ logit dynamics
    def _from_records(self, label: str, build: Callable[[Any], Any]) -> pd.DataFrame:
        self._iterations(label)
        return _frame(build(self.logit_records()))

    def argmax_concentration(self) -> pd.DataFrame:
        """tab:argmax_concentration."""
        return self._from_records("tab:argmax_concentration", ld.argmax_concentration)

    def decision_boundary(self) -> pd.DataFrame:
        """tab:decision_boundary."""
        return self._from_records("tab:decision_boundary", ld.decision_boundary)

    def gap_distributions(self) -> pd.DataFrame:
        """tab:gap_distributions."""
        return self._from_records("tab:gap_distributions", ld.gap_distributions)

    def reorg_argmax(self, regime: str = "low") -> pd.DataFrame:
        """tab:reorg_lo_argmax (``regime="low"``) or tab:reorg_st_argmax (``"stable"``)."""
        return self._from_records(f"tab:reorg_{regime}_argmax", lambda r: ld.reorg_argmax(r, _regime(regime)))

    def reorg_all(self, regime: str = "low") -> pd.DataFrame:
        """tab:reorg_lo_all (``regime="low"``) or tab:reorg_st_all (``"stable"``)."""
        return self._from_records(f"tab:reorg_{regime}_all", lambda r: ld.reorg_all(r, _regime(regime)))

    def later_iter_computation(self) -> pd.DataFrame:
        """tab:later_iter_computation."""
        return self._from_records("tab:later_iter_computation", ld.later_iter_computation)

    def basin_shift_activity(self) -> pd.DataFrame:
        """tab:basin_shift_activity."""
        self._iterations("tab:basin_shift_activity")
        return _frame(ld.basin_shift_activity(self.regime_labels()))

    # ------------------------------------------------------------------------------------ precision, monitoring
    def precision_proof(self, alpha: Any = None) -> pd.DataFrame:
        """tab:precision_proof at the basin-shift positions (``alpha``: the checkpoint's [L, d] coefficients for the
        analytic bound, optional)."""
        self._iterations("tab:precision_proof")
        return _frame(precision_proof(self.run, self.regime_labels(), alpha=alpha))

    def convergence_monitoring(self) -> pd.DataFrame:
        """The statistics behind fig:convergence_monitoring."""
        self._fixed_depth("fig:convergence_monitoring")
        return _frame(self.convergence())

    # ------------------------------------------------------------------------------------ what is supported
    MEASUREMENTS = ("staged_breakdown", "main_results", "overthinking", "repetition", "convergent_reasoning",
                    "episode_conduct",
                    "causal_ordering", "pos0_divergence", "basin_summary", "argmax_concentration",
                    "decision_boundary", "gap_distributions", "reorg_argmax", "reorg_all", "later_iter_computation",
                    "basin_shift_activity", "precision_proof", "convergence_monitoring")

    def available(self) -> pd.DataFrame:
        """One row per measurement method: ``measurement``, ``available`` (bool), ``reason`` ("" when available).

        It computes each measurement (cached shared steps make this about the cost of the slowest one)."""
        rows = []
        for name in self.MEASUREMENTS:
            try:
                getattr(self, name)()
                rows.append((name, True, ""))
            except NotAvailable as why:
                rows.append((name, False, str(why)))
        return pd.DataFrame(rows, columns=["measurement", "available", "reason"])


def _regime(name: str) -> str:
    if name not in ("low", "stable"):
        raise UsageError(f"regime must be 'low' or 'stable', got {name!r}")
    return ld.LOW if name == "low" else ld.STABLE


def open_run(run: str | Path | Run, baseline: str | Path | Run | None = None, **options: Any) -> RunAnalysis:
    """:class:`RunAnalysis` of ``run`` (``analyses.open``)."""
    return RunAnalysis(run, baseline, **options)
