"""The artefact counts ``docs/results.md`` states for the current catalogue equal the catalogue's (issue 44: the page
said 32 written and 34 skipped long after the catalogue had grown). Counts of older runs are stated as such."""

from __future__ import annotations

import re
from pathlib import Path

from sst_interp.reporting.registry import all_specs, plan

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results.md"


#: the two places the page states today's catalogue size
STATED = re.compile(r"catalogue plans (\d+) artefacts for one run|today's has (\d+)")


def test_the_catalogue_count_in_results_md_is_the_catalogues():
    stated = [int(a or b) for a, b in STATED.findall(RESULTS.read_text())]
    assert len(stated) == 2, "docs/results.md no longer states the catalogue's count twice; update this test"
    planned = len(plan(all_specs(), ["run"], []))
    assert stated == [planned, planned], f"docs/results.md says {stated}; the catalogue plans {planned}"
