"""Writing a table as Markdown, CSV and LaTeX (booktabs), and as an HTML fragment for the page.

CSV keeps every value exactly (full float precision, so it parses back to the analysis values); Markdown, LaTeX
and HTML show formatted values (:func:`format_value`: 4 significant digits, integers as integers, very small or
large numbers in scientific notation, missing values as an em dash). Notes (one-line strings) follow the table.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.outputs import write_output

MISSING = "\u2014"
_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "\u2014": "---", "\u2192": r"$\to$", "\u2265": r"$\geq$", "\u2264": r"$\leq$"}


def format_value(value: Any) -> str:
    """A cell as text: ints plain, floats to 4 significant digits (scientific below 1e-3 or from 1e6), NaN/None
    as an em dash, booleans as yes/no."""
    if value is None or value is pd.NA:
        return MISSING
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if math.isnan(v):
            return MISSING
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if v == int(v) and abs(v) < 1e6:
            return str(int(v))
        if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e6):
            return f"{v:.3g}"
        return f"{v:.4g}"
    if isinstance(value, (list, tuple, np.ndarray)):
        return ", ".join(format_value(v) for v in value)
    return str(value)


def formatted(frame: pd.DataFrame) -> list[list[str]]:
    """Rows of formatted cells."""
    return [[format_value(v) for v in row] for row in frame.itertuples(index=False, name=None)]


def _numeric(frame: pd.DataFrame) -> list[bool]:
    return [pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])
            for c in frame.columns]


def to_markdown(frame: pd.DataFrame, title: str = "", notes: Sequence[str] = ()) -> str:
    """A GitHub-style Markdown table (numeric columns right-aligned), preceded by ``title`` and followed by notes."""
    header = [str(c) for c in frame.columns]
    align = ["---:" if num else ":---" for num in _numeric(frame)]

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = [f"**{title}**", ""] if title else []
    lines.append("| " + " | ".join(cell(h) for h in header) + " |")
    lines.append("| " + " | ".join(align) + " |")
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in formatted(frame)]
    if notes:
        lines.append("")
        lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def latex_escape(text: str) -> str:
    """Escape LaTeX special characters."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))


def to_latex(frame: pd.DataFrame, caption: str, label: str, notes: Sequence[str] = ()) -> str:
    """A booktabs ``table`` environment: caption, label, ``\\toprule``/``\\midrule``/``\\bottomrule``, notes in a
    spanning row under the body."""
    spec = "".join("r" if num else "l" for num in _numeric(frame)) or "l"
    n = max(len(frame.columns), 1)
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        rf"\caption{{{latex_escape(caption)}}}",
        rf"\label{{{label}}}",
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        " & ".join(latex_escape(str(c)) for c in frame.columns) + r" \\",
        r"\midrule",
    ]
    lines += [" & ".join(latex_escape(v) for v in row) + r" \\" for row in formatted(frame)]
    if notes:
        lines.append(r"\midrule")
        lines += [rf"\multicolumn{{{n}}}{{l}}{{\footnotesize {latex_escape(note)}}} \\" for note in notes]
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def to_html(frame: pd.DataFrame, notes: Sequence[str] = ()) -> str:
    """An HTML ``<table>`` fragment with formatted cells (numeric columns right-aligned) and a notes list."""
    nums = _numeric(frame)
    head = "".join(f'<th class="{"num" if num else "txt"}">{html.escape(str(c))}</th>'
                   for c, num in zip(frame.columns, nums))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"num" if num else "txt"}">{html.escape(v)}</td>' for v, num in zip(row, nums))
        + "</tr>" for row in formatted(frame))
    out = f'<table class="data"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    if notes:
        out += '<ul class="notes">' + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>"
    return out


def write_table(frame: pd.DataFrame, out: Path, name: str, caption: str, label: str,
                notes: Sequence[str] = ()) -> list[Path]:
    """Write ``<out>/<name>.md``, ``.csv`` and ``.tex``; returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    md, csv, tex = (out / f"{name}.{ext}" for ext in ("md", "csv", "tex"))
    write_output(md, to_markdown(frame, caption, notes))
    write_output(csv, frame.to_csv(index=False))
    write_output(tex, to_latex(frame, caption, label, notes))
    return [md, csv, tex]
