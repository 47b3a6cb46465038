"""Every repository file the docs cite exists (issue 45 item 7): a path such as ``bench/results/compile.log`` or
``sst_interp/model/loops.py`` inside backticks or a Markdown link in ``README.md`` or ``docs/*.md`` names a tracked
file or folder. A figure whose file is gone keeps its citation only where its paragraph says the file is no longer
in the repository (and how to measure it again)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "docs").glob("*/*.md"))]
#: The top-level folders whose files the docs cite (package paths included: ``sst_interp/analyses/x.py`` is
#: ``analyses/x.py``, as pyproject's package-dir maps it).
ROOTS = ("bench", "scripts", "sst_interp", "tests", "docs", "analyses", "hooks", "examples")
PACKAGE_DIRS = {"sst_interp/analyses/": "analyses/", "sst_interp/hooks/": "hooks/"}
#: The phrase that keeps the citation of a file that is gone (in the citation's paragraph).
GONE = "no longer in the repository"

_SPAN = re.compile(r"`([^`]+)`|\]\(([^)\s]+)\)")
_PATH = re.compile(r"(?<![\w./-])((?:\.\./)*(?:%s)/[\w./-]*[\w/])" % "|".join(ROOTS))
#: What follows a path that is a template, not a file: ``test_family_<name>.py``, ``runs/{name}``, ``part-*``.
_TEMPLATE = re.compile(r"[<{*]|\.\.\.")


def cited_paths(text: str) -> list[tuple[str, str]]:
    """(path, its paragraph) for every repository path in a backtick span or a link target of ``text``."""
    found = []
    for paragraph in re.split(r"\n\s*\n", text):
        for span in _SPAN.finditer(paragraph):
            inside = span.group(1) or span.group(2)
            for match in _PATH.finditer(inside):
                if not _TEMPLATE.match(inside, match.end()):
                    found.append((match.group(1), paragraph))
    return found


def resolve(path: str) -> Path:
    """The repository file ``path`` names (a link's ``../`` and ``#anchor`` dropped, package dirs mapped)."""
    path = path.split("#", 1)[0]
    while path.startswith("../"):
        path = path[3:]
    for package, folder in PACKAGE_DIRS.items():
        if path.startswith(package):
            path = folder + path[len(package):]
    if path.startswith("sst_interp/") and not (REPO / path).exists() and (REPO / (path + ".py")).exists():
        path += ".py"  # a module named without its suffix
    return REPO / path


def missing_citations(doc: Path) -> list[str]:
    """The paths ``doc`` cites that are not in the repository, unless their paragraph says they are gone."""
    return [f"{doc.relative_to(REPO)} cites {path!r}, which is not in the repository"
            for path, paragraph in cited_paths(doc.read_text(encoding="utf-8"))
            if not resolve(path).exists() and GONE not in " ".join(paragraph.split())]


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(REPO)))
def test_every_cited_repository_path_exists(doc):
    missing = missing_citations(doc)
    assert not missing, "\n".join(missing)


def test_the_reader_finds_paths_in_spans_and_links_and_skips_templates():
    text = ("Run `python bench/gpu_check.py --paper-shape`, see [the log](../bench/results/compile.log) and "
            "`tests/unit/model/test_family_<name>.py`.\n\nThe JSON `bench/results/gone.json` is no longer in the "
            "repository; rerun with ...")
    assert [path for path, _ in cited_paths(text)] == ["bench/gpu_check.py", "../bench/results/compile.log",
                                                       "bench/results/gone.json"]
    assert resolve("../docs/scaling.md#on-a-gpu") == REPO / "docs/scaling.md"
    assert resolve("sst_interp/analyses/basins.py") == REPO / "analyses/basins.py"
