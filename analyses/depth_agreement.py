"""Agreement of the halting rules with convergence monitoring: the iteration each rule stops at against the
iteration at which the L2 change of the state falls below the run's median change (the quantity of
``fig:convergence_monitoring``), over the positions of :mod:`sst_interp.analyses.depth_positions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.analyses.depth_positions import PolicyPositions
from sst_interp.kernels.results import AnalysisResult


def convergence_agreement(pp: PolicyPositions) -> pd.DataFrame:
    """Per policy, over positions with both decisions: ``positions``, ``agree`` (same iteration), ``earlier`` /
    ``later`` (the rule stops before / after convergence), ``mean_difference`` (rule minus convergence, iterations),
    Cohen's kappa and Spearman's rho with its p (NaN where either side is constant)."""
    from scipy import stats
    from sklearn.metrics import cohen_kappa_score

    rows = []
    for (rule, policy), part in pp.positions.groupby(["rule", "policy"], sort=False):
        both = part[(part["iterations"] > 0) & (part["converged"] > 0)]
        a, b = both["iterations"].to_numpy(), both["converged"].to_numpy()
        row = {"rule": rule, "policy": policy, "positions": int(len(both))}
        if len(both):
            constant = np.unique(a).size < 2 or np.unique(b).size < 2
            rho = stats.spearmanr(a, b) if not constant else None
            row.update(agree=float((a == b).mean()), earlier=float((a < b).mean()), later=float((a > b).mean()),
                       mean_difference=float((a - b).mean()),
                       cohen_kappa=float(cohen_kappa_score(a, b)) if not (np.unique(np.r_[a, b]).size < 2) else np.nan,
                       spearman_rho=float(rho.statistic) if rho is not None else np.nan,
                       spearman_p=float(rho.pvalue) if rho is not None else np.nan)
        rows.append(row)
    columns = ["rule", "policy", "positions", "agree", "earlier", "later", "mean_difference", "cohen_kappa",
               "spearman_rho", "spearman_p"]
    return pd.DataFrame(rows).reindex(columns=columns)


@dataclass(frozen=True)
class AgreementResult(AnalysisResult):
    """:func:`convergence_agreement` of the median-threshold policies, with the convergence threshold."""

    frame: pd.DataFrame
    l2_threshold: float
    layer: int
    depth: int
    meta: dict[str, Any] = field(default_factory=dict)

    def table(self) -> pd.DataFrame:
        return self.frame
