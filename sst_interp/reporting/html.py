"""``index.html``: every produced artefact with its one-line caption (tables inline, figures as ``<img>``), the
inputs, and the artefacts that were skipped (with the reason) or failed (with the error)."""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sst_interp import __version__
from sst_interp.reporting.artefacts import FAMILIES, Artefact, ArtefactData
from sst_interp.reporting.config import ReportInputs
from sst_interp.reporting.tables import to_html

Status = Literal["ok", "skipped", "failed"]

CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2rem auto; max-width: 1200px;
       color: #222; line-height: 1.4; padding: 0 1rem; }
h1 { margin-bottom: 0.2rem; } h2 { border-bottom: 2px solid #ddd; padding-bottom: 0.2rem; margin-top: 2.5rem; }
section.artefact { margin: 1.5rem 0 2rem; } section.artefact h3 { margin-bottom: 0.2rem; font-family: monospace; }
.label { color: #777; font-weight: normal; font-size: 0.85em; margin-left: 0.5rem; }
.caption { margin: 0.2rem 0 0.6rem; } .files { font-size: 0.85em; color: #555; }
table.data, table.meta { border-collapse: collapse; font-size: 0.85em; margin: 0.4rem 0; }
table.data th, table.data td, table.meta th, table.meta td { border-bottom: 1px solid #e4e4e4; padding: 0.2rem 0.6rem; }
table.data th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
ul.notes { font-size: 0.85em; color: #444; margin-top: 0.3rem; }
img.figure { max-width: 100%; border: 1px solid #eee; }
.scroll { overflow-x: auto; } .failed { color: #a00; } pre { white-space: pre-wrap; font-size: 0.8em; }
nav ul { columns: 2; }
"""


@dataclass
class Outcome:
    """What happened to one artefact.

    Args:
        artefact: the artefact.
        status: "ok", "skipped" or "failed".
        files: files written (ok only).
        reason: why it was skipped, or the error message when it failed.
        detail: the traceback of a failure.
        data: the data (ok tables are shown inline from it).
        cached: the data came from the cache.
        seconds: time spent on it.
    """

    artefact: Artefact
    status: Status
    files: list[Path] = field(default_factory=list)
    reason: str = ""
    detail: str = ""
    data: ArtefactData | None = None
    cached: bool = False
    seconds: float = 0.0


def _esc(text: object) -> str:
    return html.escape(str(text))


def _files(files: Sequence[Path], out: Path) -> str:
    links = [f'<a href="{_esc(p.relative_to(out).as_posix())}">{_esc(p.suffix.lstrip("."))}</a>' for p in files]
    return f'<p class="files">Files: {" ".join(links)}</p>' if links else ""


def _artefact_html(outcome: Outcome, out: Path) -> str:
    art = outcome.artefact
    spec = art.spec
    label = f'<span class="label">{_esc(art.label)}</span>' if spec.label else ""
    target = f" (run {art.target})" if spec.scope == "run" and art.name != spec.name else ""
    parts = [f'<section class="artefact" id="{_esc(art.name)}">',
             f"<h3>{_esc(art.name)}{label}</h3>",
             f'<p class="caption">{_esc(spec.caption)}{_esc(target)}</p>']
    if spec.kind == "table" and outcome.data is not None:
        parts.append(f'<div class="scroll">{to_html(outcome.data.tables["main"], outcome.data.notes)}</div>')
    else:
        png = next((p for p in outcome.files if p.suffix == ".png"), None)
        if png is not None:
            parts.append(f'<img class="figure" src="{_esc(png.relative_to(out).as_posix())}" '
                         f'alt="{_esc(art.name)}: {_esc(spec.caption)}">')
        if outcome.data is not None and outcome.data.notes:
            parts.append('<ul class="notes">' + "".join(f"<li>{_esc(n)}</li>" for n in outcome.data.notes) + "</ul>")
    parts.append(_files(outcome.files, out))
    parts.append("</section>")
    return "\n".join(parts)


def turns_covered(run: Any) -> str:
    """How many model turns the run's tables cover: ``"1 per question"`` for completions, else the episodes'
    total, mean and maximum (tables and figures pool every turn; tab:repetition averages over them)."""
    episodes = run.episodes()
    if run.protocol != "codeact" or episodes.empty:
        return "1 per question"
    turns = episodes["n_turns"]
    return f"{int(turns.sum())} in {len(turns)} episodes (mean {turns.mean():.2f}, max {int(turns.max())})"


def _inputs_html(inputs: ReportInputs) -> str:
    rows = []
    for item in inputs.runs:
        run = item.run
        base = inputs.baselines.get(item.name)
        rows.append("<tr>" + "".join(f"<td>{_esc(v)}</td>" for v in (
            item.name, item.path, item.benchmark, run.protocol, ", ".join(map(str, run.depths)),
            len(run.question_ids(run.depths[0])) if run.depths else 0, turns_covered(run), run.num_layers,
            run.hidden_size, run.dtype, base.path if base else "none",
            inputs.checkpoints.get(item.name, "none"))) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("run", "path", "benchmark", "protocol", "depths", "questions",
                                             "model turns", "layers", "d", "dtype", "baseline", "checkpoint"))
    extra = [f"<li>probe: {_esc(inputs.probe or 'none given (trained on each run when it has MUST HALT labels)')}</li>",
             f"<li>SST training log: {_esc(inputs.training.sst or 'none')}</li>",
             f"<li>baseline training log: {_esc(inputs.training.baseline or 'none')}</li>"]
    return (f'<div class="scroll"><table class="meta"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
            f'</table></div><ul>{"".join(extra)}</ul>')


def render_page(outcomes: Sequence[Outcome], inputs: ReportInputs, unsupported: dict[str, str], out: Path,
                only: Sequence[str] = ()) -> str:
    """The whole page as a string."""
    ok = [o for o in outcomes if o.status == "ok"]
    skipped = [o for o in outcomes if o.status == "skipped"]
    failed = [o for o in outcomes if o.status == "failed"]
    stamp = dt.datetime.now().isoformat(timespec="seconds")
    body = ["<h1>SST interpretability report</h1>",
            f"<p>Generated {_esc(stamp)} by sst_interp {_esc(__version__)}: {len(ok)} artefacts, "
            f"{len(skipped) + len(unsupported)} skipped, {len(failed)} failed.</p>"]
    if only:
        body.append(f"<p>Restricted with --only to: <code>{_esc(', '.join(only))}</code>.</p>")
    nav = [f'<li><a href="#{_esc(f.lower().split()[0])}">{_esc(f)}</a> '
           f"({sum(o.artefact.spec.family == f for o in ok)})</li>" for f in FAMILIES]
    nav += ['<li><a href="#skipped">Skipped</a></li>', '<li><a href="#failed">Failed</a></li>']
    body += ["<h2>Inputs</h2>", _inputs_html(inputs), f'<nav><h2>Contents</h2><ul>{"".join(nav)}</ul></nav>']
    for family in FAMILIES:
        body.append(f'<h2 id="{_esc(family.lower().split()[0])}">{_esc(family)}</h2>')
        members = [o for o in ok if o.artefact.spec.family == family]
        body += [_artefact_html(o, out) for o in members] or ["<p>Nothing in this section could be produced; see "
                                                                '<a href="#skipped">Skipped</a>.</p>']
    rows = [(o.artefact.name, o.artefact.spec.caption, o.reason) for o in skipped]
    rows += [(name, "(paper artefact)", reason) for name, reason in unsupported.items()]
    body.append('<h2 id="skipped">Skipped</h2>')
    if rows:
        body.append('<table class="meta"><thead><tr><th>artefact</th><th>what it shows</th><th>why it was skipped'
                    '</th></tr></thead><tbody>' + "".join(
                        f'<tr id="{_esc(n)}"><td><code>{_esc(n)}</code></td><td>{_esc(c)}</td><td>{_esc(r)}</td></tr>'
                        for n, c, r in rows) + "</tbody></table>")
    else:
        body.append("<p>Nothing was skipped.</p>")
    body.append('<h2 id="failed">Failed</h2>')
    if failed:
        body += [f'<div class="failed" id="{_esc(o.artefact.name)}"><h3>{_esc(o.artefact.name)}</h3>'
                 f"<p>{_esc(o.reason)}</p><details><summary>traceback</summary><pre>{_esc(o.detail)}</pre></details>"
                 "</div>" for o in failed]
    else:
        body.append("<p>Nothing failed.</p>")
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>SST report</title>"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_page(outcomes: Sequence[Outcome], inputs: ReportInputs, unsupported: dict[str, str], out: Path,
               only: Sequence[str] = ()) -> Path:
    """Write ``<out>/index.html``; returns its path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "index.html"
    path.write_text(render_page(outcomes, inputs, unsupported, out, only), encoding="utf-8")
    return path
