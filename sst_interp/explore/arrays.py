"""Arrays to JSON: NaN (an unrecorded cell) becomes null, numpy scalars become Python numbers."""

from __future__ import annotations

from typing import Any

import numpy as np


def plain(values: Any, digits: int | None = 6) -> Any:
    """``values`` (an array of any shape, or a scalar) as nested lists of floats/ints with None for NaN.

    Floats are rounded to ``digits`` significant decimals (None: kept whole), which keeps the JSON of a position
    view small; the tests compare what the page shows against the Run API at that precision.
    """
    arr = np.asarray(values)
    if arr.dtype.kind in "iub":
        return arr.tolist()
    if arr.ndim == 0:
        x = float(arr)
        return None if np.isnan(x) else (round(x, digits) if digits is not None else x)
    return [plain(v, digits) for v in arr]
