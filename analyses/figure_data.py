"""The data behind a figure, as frames a notebook can plot (no matplotlib here): :class:`FigureData`.

A figure's measurement computes :class:`FigureData` (named long-form frames plus the numbers the figure annotates)
in the family module that owns it (``sankey_figure`` in :mod:`sst_interp.analyses.evaluation`, the layer profiles in
:mod:`~sst_interp.analyses.basin_profiles`, the heatmaps in :mod:`~sst_interp.analyses.by_question`,
``monitoring_figure`` in :mod:`~sst_interp.analyses.convergence`, ...); the report draws it in the entry's figure
style (:mod:`sst_interp.reporting.styles`) and ``a.data("fig:...")`` returns the main frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from sst_interp.kernels.results import AnalysisResult


@dataclass(frozen=True)
class FigureData(AnalysisResult):
    """A figure's data.

    Args:
        tables: name -> long-form DataFrame (one row per plotted value).
        meta: JSON-able numbers and texts the figure annotates (thresholds, panel titles, notes).
        main: the name of the frame :meth:`table` returns (the one ``a.data`` gives).
    """

    tables: dict[str, pd.DataFrame]
    meta: dict[str, Any] = field(default_factory=dict)
    main: str = ""

    def table(self) -> pd.DataFrame:
        """The main frame."""
        return self.tables[self.main or next(iter(self.tables))]
