"""Where the tests find benchmark data: the real-row fixtures in the repository, and the optional full files.

Nothing here reaches outside the repository unless ``$SST_INTERP_SHARED_DATA`` says where: a fresh clone has only
``tests/data``.
"""

from __future__ import annotations

import os
from pathlib import Path

BENCHMARK_FIXTURES = Path(__file__).resolve().parent / "data" / "benchmarks"
"""Real first rows of GSM8K (test and train), MATH-500 and HumanEval, laid out as ``--data`` expects."""

SHARED_DATA_VARIABLE = "SST_INTERP_SHARED_DATA"


def shared_data_dir() -> Path | None:
    """The folder of full benchmark files named by ``$SST_INTERP_SHARED_DATA``, or None when it is unset."""
    value = os.environ.get(SHARED_DATA_VARIABLE)
    return Path(value).expanduser().resolve() if value else None
