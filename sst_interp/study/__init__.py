"""The analysis objects: one entry point for notebooks to every measurement of the paper.

::

    from sst_interp import study
    a = study.open("runs/demo")           # RunAnalysis: shared steps cached, one method per paper label
    a.available()
    a.staged_breakdown()
    study.open_checkpoint("checkpoints/sst")       # CheckpointAnalysis: the learned alpha figures' data
    study.open_training(sst="train/sst")          # TrainingAnalysis: loss and alpha curves
    study.open_experiment("experiments/window")   # ExperimentAnalysis: an intervention experiment's tables
    study.open_comparison(runs=[...], baseline=..., training=[...], external="gpqa")  # ablations, external

Each object looks its measurements up in :mod:`sst_interp.catalogue`, which gathers the entries every family module
declares (:mod:`sst_interp.analyses`' families, the halting probe's and the intervention experiments'). The objects
therefore sit above the catalogue (floor 6 of docs/architecture.md), and the measurement functions below it never
import them. (Until issue 45 they were ``sst_interp.analyses.open`` and friends, reached through an import up the
floors; ``analyses.open`` now raises an AttributeError naming its new place.)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sst_interp.kernels.lazy import lazy_exports, typed_exports

if TYPE_CHECKING:
    from sst_interp.store import Run
    from sst_interp.study.comparison import ComparisonAnalysis, open_comparison
    from sst_interp.study.objects import (
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

#: The public names are the `if TYPE_CHECKING:` imports above from this package's modules, each imported on first
#: use (sst_interp.kernels.lazy), so ``from sst_interp import study`` stays light. NotAvailable (defined in
#: sst_interp.analyses.availability; UnknownMeasurement is one) is what every object raises for an unsupported input.
_EXPORTS = typed_exports(__name__)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted([*_EXPORTS, "open"])


def open(run: str | Path | Run, baseline: str | Path | Run | None = None,  # noqa: A001 - the notebook entry point
         baseline_depth: int | None = None, name: str | None = None, alpha: Any = None,
         probe: str | Path | None = None, dictionary: str | Path | None = None) -> RunAnalysis:
    """The paper's measurements of one run: a :class:`~sst_interp.study.objects.RunAnalysis`.

    Args:
        run: the run directory (``python -m sst_interp.record --out``), or a :class:`~sst_interp.store.Run`.
        baseline: the matched baseline run (a path or a Run), for tab:main_results and the baseline rows of
            tab:overthinking and tab:repetition.
        baseline_depth: the baseline's depth (default: its only, or shallowest, depth).
        name: the benchmark name in multi-benchmark tables (default: the manifest's ``questions``).
        alpha: the checkpoint's blend coefficients [L, d] (or a function returning them), for
            tab:precision_proof's analytic bound.
        probe: a halting probe saved by ``python -m sst_interp.probe train``, for the probe's tables (without one
            they train a 10-neuron probe on the run's MUST HALT labels, which needs at least 2 such questions).
        dictionary: a sparse dictionary folder saved by ``python -m sst_interp.features train``, for the feature
            measurements (``a.feature_sets()``, ``a.feature_basin_shifts()``, ``a.feature_trajectories()``).

    Then ``a.available()`` (what this run supports, and why not the rest), ``a.data(label)`` (tidy data;
    ``question=``/``depth=`` for a figure's question), ``a.table(label)``, ``a.notes(label)``, one method per
    measurement (``a.staged_breakdown()``), and ``a.measurements()`` (every label with its title and columns).
    """
    from sst_interp.study.objects import open_run

    return open_run(run, baseline, baseline_depth=baseline_depth, name=name, alpha=alpha, probe=probe,
                    dictionary=dictionary)
