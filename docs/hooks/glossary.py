"""MkDocs hook: ``docs/glossary.md`` is generated from :mod:`sst_interp.kernels.glossary`, the one declaration of
every term, which the report also links its artefacts to."""

from __future__ import annotations

from sst_interp.kernels.glossary import TERMS

MARKER = "<!-- glossary -->"


def _glossary_markdown() -> str:
    lines: list[str] = []
    section = None
    for term in TERMS:
        if term.section != section:
            section = term.section
            lines += [f"## {section}", ""]
        lines += [f"{term.name} {{ #{term.anchor} }}", f":   {term.definition}"]
        if term.labels:
            lines.append(f"    Shown in: {', '.join(f'`{label}`' for label in term.labels)}.")
        lines.append("")
    return "\n".join(lines)


def on_page_markdown(markdown: str, **_: object) -> str:
    """Replace the marker with the glossary's sections and entries (a definition list)."""
    return markdown.replace(MARKER, _glossary_markdown())
