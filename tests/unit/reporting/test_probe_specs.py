"""The probe tables on edge cases: a probe whose outcome does not read the hidden state has no essential set."""

from __future__ import annotations

import numpy as np

from sst_interp.kernels.results import NotApplicable
from sst_interp.probe.features import GreedyPrune
from sst_interp.probe.tables import greedy_table


def test_greedy_prune_with_no_essential_dimension_says_why():
    prune = GreedyPrune(start=np.array([3]), essential=np.array([], dtype=np.int64), importance=np.ones(8),
                        baseline=(16, 0, 0), final=(16, 0, 0))
    result = greedy_table(prune, b=None)
    assert isinstance(result, NotApplicable)
    assert "does not read the hidden state" in result.reason and result.measurement == "tab:halting_probe_greedy_prune"
