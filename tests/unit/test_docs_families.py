"""docs/families.md holds the families table exactly as the loop declarations generate it, so it cannot drift."""

from __future__ import annotations

from pathlib import Path

from sst_interp.model.loops import LOOPS, families_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "families.md"


def test_families_table_in_the_docs_is_the_generated_one() -> None:
    text = DOC.read_text()
    start = text.index("-->\n", text.index("<!-- families-table")) + len("-->\n")
    assert text[start:text.index("\n<!-- end families-table -->")] == families_table()
    assert all((loop.title or loop.family) in families_table() for loop in LOOPS) and "Dory" in families_table()
    assert "--loop FILE.py:NAME" in families_table()
