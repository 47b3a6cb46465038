"""Measurements of the SST V2 paper (sst_interp.analyses), one module per measurement family.

For notebooks, start here::

    from sst_interp import analyses
    a = analyses.open("runs/demo")        # RunAnalysis: shared steps cached, one method per paper label
    a.available()
    a.staged_breakdown()

The modules (``basins``, ``basin_profiles``, ``divergence``, ``logit_dynamics``, ``evaluation``, ``repetition``,
``convergent``, ``convergence``, ``precision``, ``alpha``, ``stats``) hold the functions the methods call.
"""

from sst_interp.analyses.api import NotAvailable, RunAnalysis, open_run

open = open_run  # noqa: A001 - ``analyses.open(run)`` reads as the notebook entry point the design names

__all__ = ["NotAvailable", "RunAnalysis", "open", "open_run"]
