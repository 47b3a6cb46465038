"""One row of an organism's validation table: a measurement family, what the mechanism predicts, what it measured,
and whether it recovered the prediction; and the table as Markdown."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class ValidationRow:
    """One measurement family against the mechanism.

    Args:
        measurement: what was measured, and with which function.
        prediction: what the sequential hypothesis predicts.
        measured: what the measurement showed (numbers).
        recovered: whether it recovered the prediction.
        detail: the table behind the row.
    """

    measurement: str
    prediction: str
    measured: str
    recovered: bool
    detail: pd.DataFrame


def markdown(rows: list[ValidationRow], prediction: str = "prediction (sequential lookups)") -> str:
    """The validation table as Markdown (one line per row); ``prediction`` heads the prediction column."""
    lines = [f"| measurement | {prediction} | measured | recovered |", "|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row.measurement} | {row.prediction} | {row.measured} | "
                     f"{'yes' if row.recovered else 'no'} |")
    return "\n".join(lines)
