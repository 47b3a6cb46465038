"""Producing the report: select artefacts, compute (or load cached) data, write tables and figures, write the page.

Each artefact is handled on its own: a :class:`NotApplicable` (or a :class:`UsageError` an analysis raises for an
input it cannot support) is listed as skipped with its reason; any other exception is listed as failed with its
message and traceback, and the rest of the report is still produced (the CLI then exits 1). A corrupt run is bad
input and stops the report (exit 2).
"""

from __future__ import annotations

import fnmatch
import inspect
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.results import NotApplicable
from sst_interp.outputs import OutputSpaceError
from sst_interp.reporting import fig_common
from sst_interp.reporting.artefacts import Artefact, ArtefactData
from sst_interp.reporting.cache import ResultCache, code_fingerprint, make_key, path_fingerprint, source_fingerprint
from sst_interp.reporting.config import ReportConfig
from sst_interp.reporting.context import ReportContext
from sst_interp.reporting.html import Outcome, write_page
from sst_interp.reporting.inputs import ReportInputs, resolve_inputs
from sst_interp.reporting.registry import UNSUPPORTED, all_specs, plan
from sst_interp.reporting.tables import write_table
from sst_interp.store import CorruptRunError


@dataclass(frozen=True)
class ReportResult:
    """What :func:`build_report` did.

    Args:
        out: the output folder.
        index: the page.
        outcomes: one per selected artefact, in page order.
        unsupported: paper artefacts no run supports (name -> reason) that were in the selection.
    """

    out: Path
    index: Path
    outcomes: tuple[Outcome, ...]
    unsupported: dict[str, str]

    def names(self, status: str) -> list[str]:
        """Artefact names with the given status ("ok", "skipped", "failed")."""
        return [o.artefact.name for o in self.outcomes if o.status == status]

    def outcome(self, name: str) -> Outcome:
        """The outcome of one artefact."""
        for o in self.outcomes:
            if o.artefact.name == name:
                return o
        raise KeyError(name)


def select(artefacts: Sequence[Artefact], only: Sequence[str]) -> tuple[list[Artefact], dict[str, str]]:
    """The artefacts (and unsupported paper artefacts) matching ``only`` (names or globs; empty: all)."""
    if not only:
        return list(artefacts), dict(UNSUPPORTED)
    patterns = [p.strip() for p in only if p.strip()]
    names = [a.name for a in artefacts]

    def hit(name: str, base: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(base, p) for p in patterns)

    chosen = [a for a in artefacts if hit(a.name, a.spec.name)]
    unsupported = {n: r for n, r in UNSUPPORTED.items() if hit(n, n)}
    unknown = [p for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in [*names, *UNSUPPORTED])
               and not any(fnmatch.fnmatchcase(a.spec.name, p) for a in artefacts)]
    if unknown:
        raise UsageError(f"--only {', '.join(unknown)} matches no artefact; names are: {', '.join(names)}")
    return chosen, unsupported


class Fingerprints:
    """Content fingerprints of the inputs, computed once each."""

    def __init__(self, inputs: ReportInputs) -> None:
        self.inputs = inputs
        self._done: dict[str, str] = {}

    def path(self, path: Path | None) -> str | None:
        """Fingerprint of a path (None for None)."""
        if path is None:
            return None
        key = str(Path(path).resolve())
        if key not in self._done:
            self._done[key] = path_fingerprint(Path(path))
        return self._done[key]

    def of(self, need: str, art: Artefact) -> Any:
        """The fingerprint of one need of ``art``."""
        inputs = self.inputs
        if need == "runs":
            return {i.name: self.path(i.path) for i in inputs.runs}
        if need == "run":
            return self.path(inputs.run(art.target).path) if art.target else None
        if need == "baseline":
            if art.target is None:
                return {n: self.path(b.path) for n, b in inputs.baselines.items()}
            base = inputs.baselines.get(art.target)
            return self.path(base.path) if base else None
        if need == "probe":
            return self.path(inputs.probe)
        if need == "dictionary":
            return self.path(inputs.dictionary)
        if need == "checkpoint":
            if art.spec.scope == "checkpoint":
                return self.path(Path(art.target)) if art.target else None
            ckpt = inputs.checkpoints.get(art.target or "")
            return self.path(ckpt)
        if need == "training":
            return [self.path(inputs.training.sst), self.path(inputs.training.baseline),
                    *[self.path(p) for p in inputs.training.variants]]
        if need == "external":
            return self.path(inputs.external)
        if need == "experiments":
            return [self.path(p) for p in inputs.experiments]
        raise ValueError(f"unknown need {need!r}")


def _progress(enabled: bool, i: int, n: int, outcome: Outcome) -> None:
    if not enabled:
        return
    tag = {"ok": "ok", "skipped": "skipped", "failed": "FAILED"}[outcome.status]
    extra = " (cached)" if outcome.cached else ""
    why = f": {outcome.reason[:110]}" if outcome.status != "ok" else ""
    print(f"[{i:>3}/{n}] {outcome.artefact.name:<44} {tag}{extra} {outcome.seconds:5.1f}s{why}", file=sys.stderr,
          flush=True)


def _compute(art: Artefact, ctx: ReportContext) -> ArtefactData | NotApplicable:
    try:
        return art.spec.compute(ctx, art.target)
    except CorruptRunError:
        raise
    except UsageError as err:
        return NotApplicable(f"cannot be computed for this input: {err}", art.spec.label)


def _draw_key(art: Artefact, data_key: str) -> str:
    draw_file = inspect.getsourcefile(art.spec.draw) if art.spec.draw is not None else None
    files = [Path(f) for f in (draw_file, fig_common.__file__) if f]
    return make_key({"data": data_key, "draw": source_fingerprint(files)})


def produce(art: Artefact, ctx: ReportContext, cache: ResultCache, prints: Fingerprints, code: str, out: Path,
            render_keys: dict[str, str]) -> Outcome:
    """Compute (or load) one artefact and write its files."""
    start = time.perf_counter()
    key = make_key({"artefact": art.name, "code": code,
                    "inputs": {need: prints.of(need, art) for need in art.spec.needs}})
    data = cache.load(art.name, key)
    cached = data is not None
    try:
        if data is None:
            data = _compute(art, ctx)
            cache.save(art.name, key, data)
        if isinstance(data, NotApplicable):
            return Outcome(art, "skipped", reason=data.reason, cached=cached, seconds=time.perf_counter() - start)
        files = _write(art, data, out, key, render_keys)
    except (CorruptRunError, OutputSpaceError):  # the run or the disk: no other artefact can do better
        raise
    except Exception as err:  # noqa: BLE001 - listed on the page with its traceback, and the CLI exits 1
        return Outcome(art, "failed", reason=f"{type(err).__name__}: {err}", detail=traceback.format_exc(),
                       cached=cached, seconds=time.perf_counter() - start)
    return Outcome(art, "ok", files=files, data=data, cached=cached, seconds=time.perf_counter() - start)


def _write(art: Artefact, data: ArtefactData, out: Path, key: str, render_keys: dict[str, str]) -> list[Path]:
    spec = art.spec
    if spec.kind == "table":
        return write_table(data.tables["main"], out, art.name, spec.caption, art.label, data.notes)
    files = [out / f"{art.name}.png", out / f"{art.name}.pdf"]
    draw_key = _draw_key(art, key)
    if render_keys.get(art.name) == draw_key and all(f.is_file() for f in files):
        return files
    render_keys.pop(art.name, None)
    figure = spec.draw(data)  # type: ignore[misc]
    files = fig_common.save_figure(figure, out, art.name)
    render_keys[art.name] = draw_key
    return files


def build_report(config: ReportConfig) -> ReportResult:
    """Produce every selected artefact and ``index.html`` under ``config.out``."""
    inputs = resolve_inputs(config)
    artefacts = plan(all_specs(), [r.name for r in inputs.runs],
                     sorted({str(p) for p in inputs.checkpoints.values()}))
    selected, unsupported = select(artefacts, config.only)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = ResultCache(out / ".cache")
    ctx = ReportContext(inputs)
    prints = Fingerprints(inputs)
    code = code_fingerprint()
    render_keys = cache.render_keys()
    outcomes: list[Outcome] = []
    for i, art in enumerate(selected, 1):
        outcome = produce(art, ctx, cache, prints, code, out, render_keys)
        outcomes.append(outcome)
        _progress(config.progress, i, len(selected), outcome)
    cache.save_render_keys(render_keys)
    index = write_page(outcomes, inputs, unsupported, out, config.only)
    return ReportResult(out, index, tuple(outcomes), unsupported)
