"""The explorer's ``/glossary`` page: every term the panels show, from the one declaration
(:mod:`sst_interp.kernels.glossary`), so a "?" beside a panel opens the same definition the docs and the report give."""

from __future__ import annotations

from html import escape

from sst_interp.kernels.glossary import TERMS


def glossary_page() -> str:
    """The whole page as HTML: one ``<dt id=ANCHOR>`` per term, grouped by section."""
    parts = ["<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>sst-interp glossary</title>",
             "<link rel=\"stylesheet\" href=\"/static/explore.css\"></head><body class=\"glossary\">",
             "<h1>Glossary</h1><p>The terms the explorer shows, with the paper label each comes from.</p>"]
    section = None
    for term in TERMS:
        if term.section != section:
            if section is not None:
                parts.append("</dl>")
            section = term.section
            parts.append(f"<h2>{escape(section)}</h2><dl>")
        parts.append(f"<dt id=\"{term.anchor}\">{escape(term.name)}</dt><dd>{escape(term.plain)}</dd>")
    parts.append("</dl></body></html>")
    return "".join(parts)
