"""Measurements of the SST V2 paper (sst_interp.analyses), one module per measurement family.

For notebooks, start here::

    from sst_interp import analyses
    a = analyses.open("runs/demo")        # RunAnalysis: shared steps cached, one method per paper label
    a.available()
    a.staged_breakdown()
    analyses.open_checkpoint("checkpoints/sst")       # CheckpointAnalysis: the learned alpha figures' data
    analyses.open_training(sst="train/sst")          # TrainingAnalysis: loss and alpha curves
    analyses.open_comparison(runs=[...], baseline=..., training=[...], external="gpqa")  # ablations, external

The modules (``basins``, ``basin_profiles``, ``divergence``, ``logit_dynamics``, ``evaluation``, ``repetition``,
``convergent``, ``convergence``, ``precision``, ``alpha``, ...) hold the functions the methods call; the statistics
and result types they share are in :mod:`sst_interp.kernels`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sst_interp.kernels.lazy import lazy_exports

if TYPE_CHECKING:
    from sst_interp.analyses.api import (
        CheckpointAnalysis,
        ExperimentAnalysis,
        NotAvailable,
        RunAnalysis,
        TrainingAnalysis,
        open_checkpoint,
        open_experiment,
        open_run,
        open_training,
    )
    from sst_interp.analyses.comparisons import ComparisonAnalysis, open_comparison

#: Importing the package loads nothing heavy; torch and scikit-learn load when a measurement needs them.
__getattr__, __dir__ = lazy_exports(__name__, {
    **{name: "sst_interp.analyses.api" for name in (
        "CheckpointAnalysis", "ExperimentAnalysis", "NotAvailable", "RunAnalysis", "TrainingAnalysis",
        "open_checkpoint", "open_experiment", "open_run", "open_training")},
    **{name: "sst_interp.analyses.comparisons" for name in ("ComparisonAnalysis", "open_comparison")}})


def open(run: Any, **kwargs: Any) -> RunAnalysis:  # noqa: A001 - ``analyses.open(run)``: the notebook entry point
    """``analyses.open(path_or_run, baseline=None, ...)``: :func:`sst_interp.analyses.api.open_run`."""
    from sst_interp.analyses.api import open_run

    return open_run(run, **kwargs)

__all__ = ["CheckpointAnalysis", "ComparisonAnalysis", "ExperimentAnalysis", "NotAvailable", "RunAnalysis", "TrainingAnalysis", "open",
           "open_checkpoint", "open_comparison", "open_experiment", "open_run", "open_training"]
