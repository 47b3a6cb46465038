"""``index.html``: every produced artefact with its one-line caption (tables inline, figures as ``<img>``), the
inputs, and the artefacts that were skipped (with the reason) or failed (with the error).

The markup is the jinja2 template ``templates/index.html.j2`` (autoescaped); this module only gathers what it shows.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jinja2

from sst_interp import __version__
from sst_interp.kernels.glossary import TERMS, Term, terms_for
from sst_interp.outputs import write_output
from sst_interp.reporting.artefacts import FAMILIES, Artefact, ArtefactData
from sst_interp.reporting.inputs import ReportInputs
from sst_interp.reporting.tables import to_html

Status = Literal["ok", "skipped", "failed"]

TEMPLATE = "index.html.j2"
_GLOSSARY_ORDER = {term.anchor: index for index, term in enumerate(TERMS)}
INPUT_HEADINGS = ("run", "path", "benchmark", "protocol", "depths", "questions", "model turns", "layers", "d", "dtype",
                  "baseline", "checkpoint")


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


@functools.cache
def _environment() -> jinja2.Environment:
    """The template environment (built once): package templates, autoescaped, undefined names are errors."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("sst_interp.reporting", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def _family_anchor(family: str) -> str:
    return family.lower().split()[0]


def _artefact_view(outcome: Outcome, out: Path) -> dict[str, Any]:
    """What the template shows of one produced artefact."""
    art = outcome.artefact
    spec = art.spec
    table_html = None
    if spec.kind == "table" and outcome.data is not None:
        # to_html escapes every cell itself; the template marks it `safe` so it is not escaped a second time.
        table_html = to_html(outcome.data.tables["main"], outcome.data.notes)
    png = next((p for p in outcome.files if p.suffix == ".png"), None)
    return {
        "name": art.name,
        "label": art.label if spec.label else "",
        "caption": spec.caption,
        "target": f" (run {art.target})" if spec.scope == "run" and art.name != spec.name else "",
        "table_html": table_html,
        "png": png.relative_to(out).as_posix() if png is not None else "",
        "notes": list(outcome.data.notes) if outcome.data is not None else [],
        "files": [(p.relative_to(out).as_posix(), p.suffix.lstrip(".")) for p in outcome.files],
        "terms": [(term.anchor, term.name) for term in terms_for(art.label if spec.label else "")],
    }


def glossary_entries(labels: Sequence[str]) -> list[dict[str, str]]:
    """The glossary entries the produced artefacts (their paper labels) use, in glossary order, once each."""
    seen: dict[str, Term] = {}
    for label in labels:
        for term in terms_for(label):
            seen.setdefault(term.anchor, term)
    order = [term.anchor for term in sorted(seen.values(), key=lambda t: _GLOSSARY_ORDER[t.anchor])]
    return [{"anchor": anchor, "name": seen[anchor].name, "definition": seen[anchor].plain}
            for anchor in order]


def turns_covered(run: Any) -> str:
    """How many model turns the run's tables cover: ``"1 per question"`` for completions, else the episodes'
    total, mean and maximum (tables and figures pool every turn; tab:repetition averages over them)."""
    episodes = run.episodes()
    if run.protocol != "codeact" or episodes.empty:
        return "1 per question"
    turns = episodes["n_turns"]
    return f"{int(turns.sum())} in {len(turns)} episodes (mean {turns.mean():.2f}, max {int(turns.max())})"


def _input_rows(inputs: ReportInputs) -> list[tuple[Any, ...]]:
    """One row per run, in the order of :data:`INPUT_HEADINGS`."""
    rows = []
    for item in inputs.runs:
        run = item.run
        base = inputs.baselines.get(item.name)
        rows.append((item.name, item.path, item.benchmark, run.protocol, ", ".join(map(str, run.depths)),
                     len(run.question_ids(run.depths[0])) if run.depths else 0, turns_covered(run), run.num_layers,
                     run.hidden_size, run.dtype, base.path if base else "none",
                     inputs.checkpoints.get(item.name, "none")))
    return rows


def render_page(outcomes: Sequence[Outcome], inputs: ReportInputs, unsupported: dict[str, str], out: Path,
                only: Sequence[str] = ()) -> str:
    """The whole page as a string."""
    ok = [o for o in outcomes if o.status == "ok"]
    skipped = [o for o in outcomes if o.status == "skipped"]
    failed = [o for o in outcomes if o.status == "failed"]
    skipped_rows = [(o.artefact.name, o.artefact.spec.caption, o.reason) for o in skipped]
    skipped_rows += [(name, "(paper artefact)", reason) for name, reason in unsupported.items()]
    families = [{"name": family, "anchor": _family_anchor(family),
                 "artefacts": [_artefact_view(o, out) for o in ok if o.artefact.spec.family == family]}
                for family in FAMILIES]
    return _environment().get_template(TEMPLATE).render(
        stamp=dt.datetime.now().isoformat(timespec="seconds"),
        version=__version__,
        n_ok=len(ok),
        n_skipped=len(skipped) + len(unsupported),
        n_failed=len(failed),
        only=", ".join(only),
        input_headings=INPUT_HEADINGS,
        input_rows=_input_rows(inputs),
        probe=inputs.probe or "none given (trained on each run when it has MUST HALT labels)",
        sst_log=inputs.training.sst or "none",
        baseline_log=inputs.training.baseline or "none",
        families=families,
        skipped=skipped_rows,
        failed=[{"name": o.artefact.name, "reason": o.reason, "detail": o.detail} for o in failed],
        glossary=glossary_entries([o.artefact.label for o in ok if o.artefact.spec.label]),
    )


def write_page(outcomes: Sequence[Outcome], inputs: ReportInputs, unsupported: dict[str, str], out: Path,
               only: Sequence[str] = ()) -> Path:
    """Write ``<out>/index.html``; returns its path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "index.html"
    write_output(path, render_page(outcomes, inputs, unsupported, out, only))
    return path
