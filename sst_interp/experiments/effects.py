"""The columns the window and steer tables share: flips against the clean depth-k run with McNemar's exact p, and
the clean depth-k token's log-prob change with its bootstrap interval over questions."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from sst_interp.kernels.stats import bootstrap_ci, mcnemar_exact


def flip_and_logprob_columns(broken: int, fixed: int, changes: pd.Series, resamples: int, seed: int) -> dict[str, Any]:
    """``broken``/``fixed`` flips, their exact McNemar p (1.0 without flips), and the mean log-prob change over the
    questions where the token stayed in both top-Ks with its 95% bootstrap CI (NaN where none did); ``changes`` is
    NaN for censored questions."""
    kept = changes.dropna().to_numpy(float)
    ci = bootstrap_ci(kept, n_resamples=resamples, seed=seed) if len(kept) else None
    return {
        "broken": broken, "fixed": fixed,
        "mcnemar_exact_p": float(mcnemar_exact(broken, fixed).pvalue) if broken + fixed else 1.0,
        "logprob_change_mean": float(np.mean(kept)) if len(kept) else float("nan"),
        "logprob_change_ci_low": ci.low if ci else float("nan"),
        "logprob_change_ci_high": ci.high if ci else float("nan"),
        "logprob_compared": int(len(kept)), "logprob_censored": int(changes.isna().sum()),
    }
