"""Shared analyses of one report, computed at most once and only when an artefact that needs them is not cached.

Several artefacts read the same analysis (every basin figure reads one :func:`punctuated_equilibrium`; every
logit table reads one set of comparison records; the probe tables share one trained probe), so they are memoised
per run, on each run's :class:`~sst_interp.study.RunAnalysis`. Everything streams from the run one question at a
time (the analyses' contract).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

from sst_interp.analyses.checkpoint_figures import AlphaMatrix
from sst_interp.kernels.results import NotApplicable
from sst_interp.reporting.inputs import ReportInputs, RunInput
from sst_interp.study.comparison import ComparisonAnalysis
from sst_interp.study.objects import CheckpointAnalysis, ExperimentAnalysis, RunAnalysis, TrainingAnalysis

T = TypeVar("T")


class ReportContext:
    """Lazily computed, memoised analyses over :class:`ReportInputs`."""

    def __init__(self, inputs: ReportInputs) -> None:
        self.inputs = inputs
        self._memo: dict[tuple[str, ...], Any] = {}

    def memo(self, key: tuple[str, ...], build: Callable[[], T]) -> T:
        """``build()`` once per ``key``."""
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    # ------------------------------------------------------------------------------------------ runs
    def run_input(self, name: str | None) -> RunInput:
        """The run called ``name`` (the only run when None)."""
        if name is None:
            return self.inputs.runs[0]
        return self.inputs.run(name)

    def baseline(self, name: str | None) -> RunInput | None:
        """The matched baseline of run ``name`` (None without one)."""
        return self.inputs.baselines.get(self.run_input(name).name)

    def analysis(self, name: str | None) -> RunAnalysis:
        """The run's :class:`~sst_interp.study.RunAnalysis` (with its matched baseline): the shared steps below
        are that object's, so the report and a notebook compute them the same way."""
        item = self.run_input(name)
        base = self.baseline(item.name)

        def build() -> RunAnalysis:
            depth = min(base.run.depths) if base is not None and base.run.depths else None
            def alpha() -> Any:  # read from the run's checkpoint only when tab:precision_proof needs it
                matrix = self.alpha_for_run(item.name)
                return matrix.alpha if matrix is not None else None

            return RunAnalysis(item.run, base.run if base is not None else None, baseline_depth=depth,
                               name=item.benchmark, alpha=alpha, probe=self.inputs.probe,
                               dictionary=self.inputs.dictionary)

        return self.memo(("analysis", item.name), build)

    def punctuated(self, name: str | None) -> Any:
        """:func:`~sst_interp.analyses.basin_profiles.punctuated_equilibrium` of the run."""
        return self.analysis(name).punctuated

    def threshold(self, name: str | None) -> tuple[float, str]:
        """The low-overlap threshold of the run and where it came from (its GMM crossover, else the paper's)."""
        return self.analysis(name).threshold

    def labels(self, name: str | None) -> pd.DataFrame:
        """Regime labels (low-overlap / stable per compared iteration pair) at the run's threshold."""
        return self.analysis(name).regime_labels()

    def records(self, name: str | None) -> Any:
        """:class:`~sst_interp.analyses.logit_dynamics.LogitRecords` of the run (window = full positions)."""
        return self.analysis(name).logit_records()

    def convergence(self, name: str | None) -> Any:
        """:func:`~sst_interp.analyses.convergence.convergence_monitoring` of the run."""
        return self.analysis(name).convergence()

    # ------------------------------------------------------------------------------------------ alpha
    def checkpoint_analysis(self, checkpoint: str | None) -> CheckpointAnalysis:
        """The :class:`~sst_interp.study.CheckpointAnalysis` of an SST checkpoint folder (None: the reason there
        is none, as its requirement)."""
        if checkpoint is None:
            reasons = sorted(set(self.inputs.missing_checkpoints.values()))
            missing = reasons[0] if reasons else "no SST checkpoint given (--checkpoint)"
            return self.memo(("checkpoint", ""), lambda: CheckpointAnalysis(None, missing))
        return self.memo(("checkpoint", checkpoint), lambda: CheckpointAnalysis(Path(checkpoint)))

    def experiment_analysis(self, folder: Path) -> ExperimentAnalysis:
        """The :class:`~sst_interp.study.ExperimentAnalysis` of an intervention experiment folder."""
        return self.memo(("experiment", str(folder)), lambda: ExperimentAnalysis(folder))

    def training_analysis(self) -> TrainingAnalysis:
        """The :class:`~sst_interp.study.TrainingAnalysis` of the report's training logs."""
        logs = self.inputs.training
        return self.memo(("training",), lambda: TrainingAnalysis(logs.sst, logs.baseline))

    def comparison_analysis(self) -> Any:
        """The :class:`~sst_interp.study.ComparisonAnalysis` of every run (with its matched
        baseline), every training log and the ``--external`` CSV."""

        inputs = self.inputs

        def build() -> Any:
            return ComparisonAnalysis({i.name: i.run for i in inputs.runs},
                                      {name: base.run for name, base in inputs.baselines.items()},
                                      inputs.training.folders, inputs.external,
                                      {i.name: i.benchmark for i in inputs.runs})

        return self.memo(("comparison",), build)

    def alpha(self, checkpoint: str | None) -> AlphaMatrix | NotApplicable:
        """Blend coefficients of an SST checkpoint folder (read from its safetensors; no model is built)."""
        analysis = self.checkpoint_analysis(checkpoint)
        if analysis.checkpoint is None:
            return NotApplicable(analysis.missing, "alpha")
        return analysis.alpha_matrix()

    def alpha_for_run(self, name: str | None) -> AlphaMatrix | None:
        """The alpha of the checkpoint run ``name`` was recorded with, or None."""
        ckpt = self.inputs.checkpoints.get(self.run_input(name).name)
        result = self.alpha(str(ckpt)) if ckpt is not None else None
        return result if isinstance(result, AlphaMatrix) else None
