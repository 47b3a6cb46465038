"""The measurement catalogue: every measurement of the package, gathered from the family modules that declare them.

Each family module declares its entries next to its functions, as ``MEASUREMENTS`` (and, where it has requirements
of its own, ``REQUIREMENTS``): the analyses' families, the halting probe's (:mod:`sst_interp.probe.measurements`),
the intervention experiments' (:mod:`sst_interp.experiments.measurements`), the sparse dictionaries'
(:mod:`sst_interp.features.measurements`) and the comparisons of several runs
(:mod:`sst_interp.analyses.comparisons`). This module sits above all of them (floor 6 of docs/architecture.md,
below the analysis objects) and imports each one by plain import, so what it holds is exactly what those modules
declare:

- :data:`MEASUREMENTS`: every entry, family by family in :data:`FAMILIES` order (the report sorts its page itself);
- :data:`REQUIREMENTS`: every declarative requirement, name -> check;
- :data:`BY_KEY` and :func:`lookup`: an entry by any spelling of its key, name or artefact.

The analysis objects (:mod:`sst_interp.study`: :class:`~sst_interp.study.RunAnalysis`, ...), on the floor above,
import it to look their measurements up, and the report builds one artefact per entry with a caption from it
(:mod:`sst_interp.reporting.measured`).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from sst_interp.analyses import (
    attention,
    basin_profiles,
    basins,
    by_question,
    checkpoint_figures,
    comparisons,
    convergence,
    convergent,
    depth_policies,
    divergence,
    episodes,
    evaluation,
    families,
    logit_dynamics,
    measurement,
    precision,
    repetition,
)
from sst_interp.analyses.availability import UnknownMeasurement, spellings, stripped, unknown
from sst_interp.analyses.measurement import Measurement
from sst_interp.experiments import measurements as experiments
from sst_interp.features import measurements as features
from sst_interp.probe import measurements as probe

#: The modules that declare measurements, in the catalogue's order (the paper's, roughly: evaluation, basin shifts,
#: logit dynamics, precision and convergence, the alpha and training figures, depth policies, families, the probe,
#: the experiments, the comparisons of several runs, the attention recorded per iteration, the sparse dictionaries'
#: features).
FAMILIES: tuple[ModuleType, ...] = (
    evaluation, repetition, convergent, episodes, basins, divergence, logit_dynamics, precision, convergence,
    by_question, basin_profiles, checkpoint_figures, depth_policies, families, probe, experiments, comparisons,
    attention, features,
)

#: Every measurement.
MEASUREMENTS: tuple[Measurement, ...] = tuple(entry for family in FAMILIES for entry in family.MEASUREMENTS)


def _requirements() -> dict[str, Callable[[Any], str | None]]:
    """The shared run requirements, then each family's own; a name declared twice is an error."""
    merged = dict(measurement.REQUIREMENTS)
    for family in FAMILIES:
        for name, check in getattr(family, "REQUIREMENTS", {}).items():
            if name in merged:
                raise ValueError(f"requirement {name!r} declared twice ({family.__name__})")
            merged[name] = check
    return merged


#: Every declarative requirement: name -> check (the reason it is unmet, or None). Each reads the manifest (or
#: whether an input was given) only.
REQUIREMENTS: dict[str, Callable[[Any], str | None]] = _requirements()


def _keyed(entries: tuple[Measurement, ...]) -> dict[str, Measurement]:
    """Every spelling of every entry (name, key in each spelling, artefact) -> the entry.

    Raises:
        ValueError: an entry requires an unknown requirement, or a name, label or artefact is declared twice.
    """
    out: dict[str, Measurement] = {}
    for entry in entries:
        unknown_requirements = set(entry.requires) - set(REQUIREMENTS)
        if unknown_requirements:
            raise ValueError(f"measurement {entry.name} requires unknown {sorted(unknown_requirements)}; known: "
                             f"{', '.join(REQUIREMENTS)}")
        keys = {entry.name, *spellings(entry.key), entry.artefact}
        for key in keys:
            if key in out:
                raise ValueError(f"measurement key {key!r} declared twice")
            out[key] = entry
    return out


#: Each spelling of a measurement's key, name or artefact -> the measurement.
BY_KEY: dict[str, Measurement] = _keyed(MEASUREMENTS)


def all_measurements() -> tuple[Measurement, ...]:
    """Every measurement (:data:`MEASUREMENTS`)."""
    return MEASUREMENTS


def lookup(key: str) -> Measurement:
    """The measurement named by its key (``tab:overthinking``, ``tab:gmm``), its name (``gmm``) or its artefact
    (``tab_gmm``); ``tab:``, ``tab_``, ``fig:`` and ``fig_`` are accepted in front of any of them.

    Raises:
        UnknownMeasurement: no measurement has the name (a NotAvailable; the message suggests the closest ones).
    """
    if not isinstance(key, str):
        raise UnknownMeasurement(f"a measurement key is a string such as 'tab:overthinking', got "
                                 f"{type(key).__name__}")
    found = BY_KEY.get(key.strip()) or BY_KEY.get(stripped(key))
    if found is None:
        raise unknown(key, [m.key for m in MEASUREMENTS], [m.name for m in MEASUREMENTS])
    return found

