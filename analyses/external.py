"""External comparison (sec:external, tab:external_gsm8k, tab:external_gpqa): a run's staged-compute accuracy placed
among published accuracies of other models.

The published rows come from a CSV with the columns ``model, parameters, accuracy, prompting, source`` (accuracy in
percent; a trailing ``%`` is accepted). The package ships the figures the paper cites
(``sst_interp/reporting/data/external_gsm8k.csv``, ``external_gpqa.csv``, each row with its source); they are
published numbers, copied from the sources, not measured by this package, and the table says so in its ``kind``
column and its notes.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pandas as pd

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.results import AnalysisResult

COLUMNS = ("model", "parameters", "accuracy", "prompting", "source")
#: Shipped CSVs: the name ``--external`` accepts -> (file in sst_interp/reporting/data, the paper table).
SHIPPED = {"gsm8k": ("external_gsm8k.csv", "tab:external_gsm8k"),
           "gpqa": ("external_gpqa.csv", "tab:external_gpqa")}
PUBLISHED, RECORDED = "published", "recorded"


def shipped_path(name: str) -> Path:
    """The shipped CSV of ``name`` (gsm8k or gpqa)."""
    # resolved from the root package, so that this floor never imports the reporting package above it
    file = resources.files("sst_interp") / "reporting" / "data" / SHIPPED[name][0]
    return Path(str(file))


def resolve_external(value: str | Path) -> Path:
    """``--external``'s value as a CSV path: a shipped name (gsm8k, gpqa) or a file."""
    if str(value) in SHIPPED:
        return shipped_path(str(value))
    path = Path(value)
    if not path.is_file():
        raise UsageError(f"--external {value} is neither a CSV file nor a shipped name ({', '.join(SHIPPED)})")
    return path


def read_external(path: str | Path) -> pd.DataFrame:
    """The published rows of ``path``: the :data:`COLUMNS`, accuracy a float in percent, in file order.

    Raises:
        UsageError: the file is unreadable, lacks a column, or a row's accuracy is not a number in [0, 100] (the
            line names the row: its line number in the file and its model).
    """
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            header = [h.strip() for h in (reader.fieldnames or [])]
            missing = [c for c in COLUMNS if c not in header]
            if missing:
                raise UsageError(f"--external {path}: header lacks columns {missing}; it needs {', '.join(COLUMNS)}")
            rows = []
            for line, raw in enumerate(reader, start=2):
                row = {k.strip(): (v or "").strip() for k, v in raw.items() if k is not None}
                text = row["accuracy"].removesuffix("%").strip()
                try:
                    value = float(text)
                except ValueError:
                    value = math.nan
                if not 0.0 <= value <= 100.0:  # also false for NaN
                    raise UsageError(f"--external {path}: row {line} ({row['model'] or 'no model'}) has accuracy "
                                     f"{row['accuracy']!r}; it must be a number of percent in [0, 100]")
                rows.append({**{c: row[c] for c in COLUMNS}, "accuracy": value})
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise UsageError(f"--external {path} is not a readable CSV ({err})") from err
    if not rows:
        raise UsageError(f"--external {path} has no rows")
    return pd.DataFrame(rows, columns=list(COLUMNS))


@dataclass(frozen=True)
class ExternalComparison(AnalysisResult):
    """The run's row among the published ones, sorted by accuracy (ascending, as the paper's tables).

    Args:
        published: the CSV's rows (:func:`read_external`).
        recorded: one row per placed run: ``model, parameters, accuracy, prompting, source``.
        csv_path: where the published rows came from.
        label: the paper table (tab:external_gsm8k or tab:external_gpqa), or "".
    """

    published: pd.DataFrame
    recorded: pd.DataFrame
    csv_path: str
    paper_label: str = ""

    def table(self) -> pd.DataFrame:
        """Columns: model, parameters, accuracy (%), prompting, source, kind (published or recorded), sorted by
        accuracy; a recorded row sorts after published rows of the same accuracy."""
        frames = [self.published.assign(kind=PUBLISHED), self.recorded.assign(kind=RECORDED)]
        both = pd.concat(frames, ignore_index=True)
        both["_order"] = (both["kind"] == RECORDED).astype(int)
        both = both.sort_values(["accuracy", "_order"], kind="stable").drop(columns="_order")
        return both.rename(columns={"accuracy": "accuracy_pct"}).reset_index(drop=True)


def benchmark_table(benchmark: str) -> str:
    """The paper table a run's benchmark belongs to: tab:external_gsm8k, tab:external_gpqa, or ""."""
    name = benchmark.lower()
    if name.startswith("gsm8k"):
        return SHIPPED["gsm8k"][1]
    if name.startswith("gpqa"):
        return SHIPPED["gpqa"][1]
    return ""
