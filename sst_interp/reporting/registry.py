"""The artefact registry: every spec the report knows, in page order, and binding specs to their targets.

The ``specs_*`` modules each define ``SPECS`` (a list of :class:`~sst_interp.reporting.artefacts.ArtefactSpec`);
this module collects them. It sits above them in the import graph: they import the data classes from
:mod:`sst_interp.reporting.artefacts`, never this module, so there is no cycle.
"""

from __future__ import annotations

import re
from pathlib import Path

from sst_interp.reporting import (
    specs_alpha,
    specs_basins,
    specs_comparisons,
    specs_depth,
    specs_evaluation,
    specs_families,
    specs_interventions,
    specs_logits,
    specs_monitoring,
    specs_probe,
)
from sst_interp.reporting.artefacts import FAMILIES, Artefact, ArtefactSpec

#: Paper artefacts no run can support, with the reason (listed on the page, never produced).
UNSUPPORTED: dict[str, str] = {
    "fig_architecture": "a schematic of the architecture, not a measurement",
}


def all_specs() -> list[ArtefactSpec]:
    """Every spec, in page order."""
    specs = [*specs_evaluation.SPECS, *specs_basins.SPECS, *specs_logits.SPECS, *specs_monitoring.SPECS,
             *specs_depth.SPECS, *specs_probe.SPECS, *specs_alpha.SPECS, *specs_interventions.SPECS,
             *specs_families.SPECS, *specs_comparisons.SPECS]
    names = [s.name for s in specs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"duplicate artefact names {sorted(dup)}")
    return sorted(specs, key=lambda s: FAMILIES.index(s.family))


def plan(specs: list[ArtefactSpec], run_names: list[str], checkpoints: list[str]) -> list[Artefact]:
    """Bind specs to targets: one per run for ``run`` scope, one per checkpoint for ``checkpoint`` scope."""
    out: list[Artefact] = []
    for spec in specs:
        if spec.scope == "run":
            for name in run_names:
                out.append(Artefact(spec, spec.name if len(run_names) == 1 else f"{spec.name}-{name}", name))
        elif spec.scope == "checkpoint":
            if not checkpoints:
                out.append(Artefact(spec, spec.name, None))
            for ckpt in checkpoints:
                suffix = "" if len(checkpoints) == 1 else "-" + (re.sub(r"[^A-Za-z0-9_.]+", "_", Path(ckpt).name)
                                                                 or "checkpoint")
                out.append(Artefact(spec, spec.name + suffix, ckpt))
        else:
            out.append(Artefact(spec, spec.name, None))
    return out
