"""Measurements of the SST V2 paper (sst_interp.analyses), one module per measurement family.

The modules (``basins``, ``basin_profiles``, ``divergence``, ``logit_dynamics``, ``evaluation``, ``repetition``,
``convergent``, ``convergence``, ``precision``, ``alpha``, ...) hold the functions that compute each measurement
from arrays or a :class:`~sst_interp.store.Run`, and each family module declares its measurements next to them
(``MEASUREMENTS``: :class:`~sst_interp.analyses.measurement.Measurement` entries), which :mod:`sst_interp.catalogue`
gathers; the statistics and result types they share are in :mod:`sst_interp.kernels`.

For notebooks, the analysis objects that name every measurement after its paper label are in
:mod:`sst_interp.study`, above the catalogue::

    from sst_interp import study
    a = study.open("runs/demo")
    a.staged_breakdown()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sst_interp.kernels.lazy import lazy_exports, typed_exports

if TYPE_CHECKING:
    from sst_interp.analyses.availability import NotAvailable, UnknownMeasurement

#: The public names are the `if TYPE_CHECKING:` imports above, each imported from its module on first use
#: (sst_interp.kernels.lazy), so importing the package stays light.
_EXPORTS = typed_exports(__name__)
_lazy_getattr, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)

#: The analysis objects this package held until issue 45, now in sst_interp.study (they read the catalogue, which
#: sits above this package): each old name -> an AttributeError that says where it went.
MOVED_TO_STUDY = frozenset({
    "open", "open_run", "open_checkpoint", "open_training", "open_experiment", "open_comparison", "RunAnalysis",
    "CheckpointAnalysis", "TrainingAnalysis", "ExperimentAnalysis", "ComparisonAnalysis"})


def __getattr__(name: str) -> Any:
    if name in MOVED_TO_STUDY:
        raise AttributeError(f"sst_interp.analyses.{name} moved to sst_interp.study: use `from sst_interp import "
                             f"study` and `study.{name}` (the analysis objects sit above the measurement catalogue "
                             f"they read)")
    return _lazy_getattr(name)
