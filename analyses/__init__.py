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
``convergent``, ``convergence``, ``precision``, ``alpha``, ...) hold the functions the methods call, and each family
module declares its measurements next to them (``MEASUREMENTS``: :class:`~sst_interp.analyses.measurement.Measurement`
entries), which :mod:`sst_interp.catalogue` gathers; the statistics and result types they share are in
:mod:`sst_interp.kernels`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sst_interp.kernels.lazy import lazy_exports, typed_exports

if TYPE_CHECKING:
    from sst_interp.store import Run
    from sst_interp.analyses.api import (
        CheckpointAnalysis,
        ExperimentAnalysis,
        NotAvailable,
        RunAnalysis,
        TrainingAnalysis,
        UnknownMeasurement,
        open_checkpoint,
        open_experiment,
        open_run,
        open_training,
    )
    from sst_interp.analyses.comparisons import ComparisonAnalysis, open_comparison

#: The public names are the `if TYPE_CHECKING:` imports above, each imported from its module on first use
#: (sst_interp.kernels.lazy), so importing the package stays light.
_EXPORTS = typed_exports(__name__)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted([*_EXPORTS, "open"])


def open(run: str | Path | Run, baseline: str | Path | Run | None = None,  # noqa: A001 - the notebook entry point
         baseline_depth: int | None = None, name: str | None = None, alpha: Any = None,
         probe: str | Path | None = None) -> RunAnalysis:
    """The paper's measurements of one run: a :class:`~sst_interp.analyses.api.RunAnalysis`.

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

    Then ``a.available()`` (what this run supports, and why not the rest), ``a.data(label)`` (tidy data;
    ``question=``/``depth=`` for a figure's question), ``a.table(label)``, ``a.notes(label)``, one method per
    measurement (``a.staged_breakdown()``), and ``a.measurements()`` (every label with its title and columns).
    """
    from sst_interp.analyses.api import open_run

    return open_run(run, baseline, baseline_depth=baseline_depth, name=name, alpha=alpha, probe=probe)
