"""Links to a report folder's artefacts (``python -m sst_interp.report --out DIR``), served under ``/report/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sst_interp.kernels.errors import UsageError

#: Artefact files linked (the report writes each table as Markdown, CSV and LaTeX, each figure as PNG and PDF).
LINKED_SUFFIXES = (".html", ".png", ".md", ".csv", ".pdf", ".tex")


def check_report(folder: Path | None) -> None:
    """UsageError unless ``folder`` is None or a folder holding the report's ``index.html``."""
    if folder is not None and not (folder / "index.html").is_file():
        raise UsageError(f"{folder} is not a report folder (no index.html); pass the --out of "
                         "python -m sst_interp.report")


def report_links(folder: Path | None) -> list[dict[str, Any]]:
    """``[{name, href}]``: index.html first, then every artefact file (sorted), with URLs under ``/report/``."""
    if folder is None or not folder.is_dir():
        return []
    files = [p for p in sorted(folder.rglob("*")) if p.is_file() and p.suffix in LINKED_SUFFIXES]
    files.sort(key=lambda p: (p.name != "index.html", str(p)))
    return [{"name": str(p.relative_to(folder)), "href": "/report/" + p.relative_to(folder).as_posix()}
            for p in files]
