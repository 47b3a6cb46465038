"""The docs site builds with ``mkdocs build --strict`` (broken links, missing anchors, pages outside the nav, API
objects that do not resolve and commands whose ``--help`` fails all fail it); the README stays a front page; and no
test reaches outside the repository for data."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env={"NO_MKDOCS_2_WARNING": "1",
                          "PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    record_page = (tmp_path / "site" / "commands" / "record" / "index.html").read_text()
    assert "--depths" in record_page and "--max-new-tokens" in record_page  # the generated --help is on the page
    assert "RunAnalysis" in (tmp_path / "site" / "reference" / "analyses" / "index.html").read_text()
    glossary = (tmp_path / "site" / "glossary" / "index.html").read_text()
    from sst_interp.kernels.glossary import TERMS  # the page is generated from this declaration

    assert all(f'id="{term.anchor}"' in glossary for term in TERMS)


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; the manual belongs in docs/"


def test_no_test_reads_data_outside_the_repository():
    """A fresh clone has no ../shared: only tests/paths.py may name the optional full files, and only through
    $SST_INTERP_SHARED_DATA."""
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        text = path.read_text()
        if re.search(r"""["'/]\.\./shared|parent\s*/\s*["']shared["']|parents\[\d\]\s*/\s*["']\.\./""", text):
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, f"tests reaching outside the repository: {offenders}"


def test_glossary_labels_are_measurements_and_anchors_unique():
    """A glossary term points only at labels the registry produces (a typo would silently link nothing)."""
    from sst_interp import catalogue
    from sst_interp.kernels.glossary import TERMS

    produced = {m.label for m in catalogue.all_measurements() if m.label}
    unknown = sorted({label for term in TERMS for label in term.labels} - produced)
    assert not unknown, f"glossary labels no measurement has: {unknown}"
    anchors = [term.anchor for term in TERMS]
    assert len(anchors) == len(set(anchors)) and all(re.fullmatch(r"[a-z0-9-]+", a) for a in anchors)
