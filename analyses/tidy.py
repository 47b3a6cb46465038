"""Tidy (long-form) frames from the paper-shaped tables of the analyses.

The paper's tables put several observations in one row: one column per regime or per stage, prose row keys such as
``"argmax change rate CI low (%)"``. A notebook wants one row per observation with typed columns, so it can filter,
join and plot without reshaping. These helpers turn each layout into that form; each measurement's entry
(in its family module's ``MEASUREMENTS``) names the one it uses and documents its columns.

Conventions of every tidy frame: ``quantity`` is a snake_case key derived from the paper table's row text (the text
itself is kept in ``quantity_text``); ``statistic`` is ``value``, ``ci_low`` or ``ci_high`` (a confidence bound of
the quantity of the same key); ``unit`` is ``percent``, ``nats`` or ``""``; numbers are float64 in ``value``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pandas as pd

QUANTITY_COLUMNS = ("quantity", "quantity_text", "statistic", "unit", "value")

_UNITS = {"(%)": "percent", "(nats)": "nats"}
_BOUNDS = {" CI low": "ci_low", " CI high": "ci_high"}


def snake(text: str) -> str:
    """A stable column-safe key for a row text: ``"exact tie rate (%)"`` -> ``"exact_tie_rate"``."""
    key = re.sub(r"[^0-9a-zA-Z]+", "_", text.strip().lower()).strip("_")
    return key or "value"


def parse_quantity(text: str) -> tuple[str, str, str]:
    """(key, statistic, unit) of a row text: the unit suffix and a CI bound suffix are split off the key."""
    base, unit = text.strip(), ""
    for suffix, name in _UNITS.items():
        if base.endswith(suffix):
            base, unit = base[: -len(suffix)].rstrip(), name
    statistic = "value"
    for suffix, name in _BOUNDS.items():
        if base.endswith(suffix):
            base, statistic = base[: -len(suffix)], name
    return snake(base), statistic, unit


def quantities(frame: pd.DataFrame, key: str, groups: Sequence[str] = ("value",),
               group_name: str | None = None) -> pd.DataFrame:
    """A ``key`` column of row texts and one value column per group -> one row per (quantity, group).

    Args:
        frame: the paper-shaped table.
        key: the column holding the row text (``quantity`` or ``metric``).
        groups: the value columns (``("low_overlap", "stable")``, or ``("value",)`` for a single column).
        group_name: the name of the column that says which group a row belongs to (omitted for one group).

    Returns:
        Columns ``[group_name,] quantity, quantity_text, statistic, unit, value``.
    """
    rows = []
    for _, row in frame.iterrows():
        quantity, statistic, unit = parse_quantity(str(row[key]))
        for group in groups:
            entry = {"quantity": quantity, "quantity_text": str(row[key]), "statistic": statistic, "unit": unit,
                     "value": float(row[group])}
            if group_name is not None:
                entry = {group_name: group, **entry}
            rows.append(entry)
    columns = ([group_name] if group_name is not None else []) + list(QUANTITY_COLUMNS)
    return _typed(pd.DataFrame(rows, columns=columns))


def categories(frame: pd.DataFrame, key: str, renames: dict[str, str]) -> pd.DataFrame:
    """Category rows (``group``/``outcome``/``activity`` plus counts and percentages) with a snake_case
    ``category`` key, the text in ``category_text`` and the number columns renamed with their units."""
    out = pd.DataFrame({"category": [snake(str(v)) for v in frame[key]],
                        "category_text": frame[key].astype(str).to_numpy()})
    for old, new in renames.items():
        out[new] = frame[old].to_numpy()
    return _typed(out)


def renamed(frame: pd.DataFrame, renames: dict[str, str]) -> pd.DataFrame:
    """The rows as they are, with columns renamed to carry their units (``accuracy`` -> ``accuracy_pct``)."""
    return _typed(frame.rename(columns=renames).reset_index(drop=True))


def stages(frame: pd.DataFrame) -> pd.DataFrame:
    """tab:staged_breakdown's ``stage_1 .. stage_d`` columns -> one row per (benchmark, stage):
    ``benchmark, n_questions, stage, cumulative_accuracy_pct`` (``capacity`` is the last stage's value)."""
    stage_columns = [c for c in frame.columns if re.fullmatch(r"stage_\d+", str(c))]
    long = frame.melt(id_vars=["benchmark", "N"], value_vars=stage_columns, var_name="stage",
                      value_name="cumulative_accuracy_pct")
    long["stage"] = long["stage"].str.removeprefix("stage_").astype("int64")
    long = long.rename(columns={"N": "n_questions"}).sort_values(["benchmark", "stage"], kind="stable")
    return _typed(long.reset_index(drop=True))


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    # Text columns as pandas strings and counts as int64, whatever the input table used.
    for column in frame.columns:
        if frame[column].dtype == object:
            frame[column] = frame[column].astype("string")
    return frame
