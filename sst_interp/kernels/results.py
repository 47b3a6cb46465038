"""What every analysis returns: a result shaped like the paper's table, or a reason it cannot be computed.

Every measurement in :mod:`sst_interp.analyses` returns either a subclass of
:class:`AnalysisResult` (a frozen dataclass whose ``.table()`` is shaped like the
paper's table) or a :class:`NotApplicable` that says why the run cannot support
the measurement (a single depth, no low-overlap positions, every question
correct, ...). Analyses never crash on such runs and never return tables of NaNs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import pandas as pd


@dataclass(frozen=True)
class AnalysisResult:
    """Base class of every analysis result (a frozen dataclass).

    Subclasses set ``label`` to the paper label they reproduce (e.g.
    ``"tab:causal_ordering"``) and implement :meth:`table`.
    """

    label: ClassVar[str] = ""
    applicable: ClassVar[bool] = True

    def table(self) -> pd.DataFrame:
        """The result shaped like the paper's table (one row per table row)."""
        raise NotImplementedError(f"{type(self).__name__} does not define table()")


@dataclass(frozen=True)
class NotApplicable(AnalysisResult):
    """A measurement the run cannot support, with the reason (never a crash, never NaNs).

    Args:
        reason: one line saying what the run lacks, e.g. "run has a single depth (1); need two or more".
        measurement: the paper label or function name of the measurement, when known.
    """

    reason: str
    measurement: str = ""
    applicable: ClassVar[bool] = False

    def table(self) -> pd.DataFrame:
        """One row: the measurement and the reason it cannot be computed."""
        return pd.DataFrame({"measurement": [self.measurement], "not_applicable": [self.reason]})

    def __bool__(self) -> bool:
        return False


def single_depth(depths: Sequence[object], label: str, needs: str, prefix: str = "") -> NotApplicable | None:
    """The one precondition of a measurement that compares depths: None when ``depths`` holds two or more, else
    ``NotApplicable("{prefix}run has a single depth (D); {needs}", label)`` (``no depth`` when there is none).

    Args:
        depths: the run's depths (or a correctness matrix's columns).
        label: the measurement's paper label.
        needs: what needs a second depth, e.g. ``"staged compute needs two or more"``.
        prefix: what the reason is about when several runs are measured, e.g. ``"gsm8k: "``.
    """
    if len(depths) >= 2:
        return None
    what = f"a single depth ({depths[0]})" if len(depths) == 1 else "no depth"
    return NotApplicable(f"{prefix}run has {what}; {needs}", label)


def depth_matrix_check(matrix: pd.DataFrame, label: str, needs: str, prefix: str = "") -> NotApplicable | None:
    """:func:`single_depth` for a correctness matrix (questions x depths), which also needs a question recorded at
    every depth: None when ``matrix`` has rows and two or more depth columns, else the NotApplicable saying which."""
    if matrix.empty:
        return NotApplicable(f"{prefix}no question is recorded at every depth", label)
    return single_depth(list(matrix.columns), label, needs, prefix)
