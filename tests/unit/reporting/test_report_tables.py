"""Table writers: cell formatting, Markdown, LaTeX booktabs, HTML, and CSV that round-trips exactly."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sst_interp.reporting.tables import MISSING, format_value, latex_escape, to_html, to_latex, to_markdown, write_table

FRAME = pd.DataFrame({"condition": ["staged compute", "flat depth 4"], "accuracy": [61.111111111, 42.929292929],
                      "regressions": [0, 30], "p": [9.4e-4, np.nan]})


@pytest.mark.parametrize("value, text", [
    (3, "3"), (np.int64(198), "198"), (2.0, "2"), (61.111111, "61.11"), (0.8738, "0.8738"), (9.4e-4, "0.00094"),
    (8.02e-82, "8.02e-82"), (1.2345e7, "1.23e+07"), (np.nan, MISSING), (None, MISSING), (True, "yes"),
    ("a|b", "a|b"), (float("inf"), "inf"),
])
def test_format_value(value, text):
    assert format_value(value) == text


def test_markdown_has_header_alignment_rows_and_notes():
    md = to_markdown(FRAME, "Overthinking", ["McNemar p = 0.024"]).splitlines()
    assert md[0] == "**Overthinking**"
    assert md[2] == "| condition | accuracy | regressions | p |"
    assert md[3] == "| :--- | ---: | ---: | ---: |"
    assert md[4] == "| staged compute | 61.11 | 0 | 0.00094 |"
    assert md[5] == f"| flat depth 4 | 42.93 | 30 | {MISSING} |"
    assert md[-1] == "- McNemar p = 0.024"


def test_latex_is_booktabs_with_caption_label_and_escapes():
    tex = to_latex(FRAME.rename(columns={"p": "p_value"}), "Rates in % & counts", "tab:overthinking", ["50% of N_1"])
    lines = tex.splitlines()
    assert lines[0] == r"\begin{table}[t]" and lines[-1] == r"\end{table}"
    assert r"\caption{Rates in \% \& counts}" in lines
    assert r"\label{tab:overthinking}" in lines
    assert r"\begin{tabular}{lrrr}" in lines
    body = lines[lines.index(r"\toprule") + 1: lines.index(r"\bottomrule")]
    assert body[0] == r"condition & accuracy & regressions & p\_value \\"
    assert body[1] == r"\midrule"
    assert body[2] == r"staged compute & 61.11 & 0 & 0.00094 \\"
    assert body[3] == r"flat depth 4 & 42.93 & 30 & --- \\"
    assert body[-1] == r"\multicolumn{4}{l}{\footnotesize 50\% of N\_1} \\"
    assert latex_escape("a_b{c}~^\\") == r"a\_b\{c\}\textasciitilde{}\textasciicircum{}\textbackslash{}"


def test_html_escapes_and_right_aligns_numbers():
    out = to_html(pd.DataFrame({"name": ["<b>"], "n": [5]}), ["x < y"])
    assert '<td class="txt">&lt;b&gt;</td>' in out
    assert '<td class="num">5</td>' in out
    assert "<li>x &lt; y</li>" in out


def test_write_table_csv_round_trips_exactly(tmp_path):
    frame = pd.DataFrame({"quantity": ["rate", "p"], "value": [1 / 3, 9.4e-4], "ok": [True, False]})
    paths = write_table(frame, tmp_path, "tab_x", "caption", "tab:x")
    assert [p.name for p in paths] == ["tab_x.md", "tab_x.csv", "tab_x.tex"]
    back = pd.read_csv(tmp_path / "tab_x.csv")
    pd.testing.assert_frame_equal(back, frame, check_dtype=False, check_exact=True)
