"""What a failed measurement raises, and how a measurement's name is spelled and looked up.

Every failure of ``data()`` (``result()``, ``table()``, ``notes()``) on an analysis is a :class:`NotAvailable`, a
:class:`~sst_interp.kernels.errors.UsageError` (so ``except UsageError`` and ``except ValueError`` clauses written
before it keep working): an unmet requirement, what the analysis found in the input, or a name no measurement has
(:class:`UnknownMeasurement`, with a "did you mean").

Spelling: a measurement's canonical key is its paper label (``tab:overthinking``), else ``tab:<name>`` or
``fig:<name>`` for a table or figure of this project's own. Lookups accept any of ``tab:``, ``tab_``, ``fig:``,
``fig_`` in front of a label or name, and the bare name (:func:`spellings`, :func:`stripped`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

from sst_interp.kernels.errors import UsageError

_PREFIX = re.compile(r"^(tab|fig)[:_]")


class NotAvailable(UsageError):
    """A measurement this analysis cannot support; the message says why and, where there is one, the fix (pass
    ``baseline=``, ``probe=PATH``, record more depths)."""


class UnknownMeasurement(NotAvailable):
    """No measurement has this name; the message suggests the nearest names."""


def spellings(key: str) -> set[str]:
    """Every accepted spelling of a canonical key: ``tab:x`` -> {``tab:x``, ``tab_x``}."""
    return {key, key.replace(":", "_", 1)}


def stripped(key: str) -> str:
    """The name inside a prefixed key: ``tab:gmm``, ``tab_gmm``, ``fig:gmm``, ``fig_gmm`` -> ``gmm``."""
    return _PREFIX.sub("", key.strip())


def unknown(key: str, keys: Iterable[str], names: Iterable[str]) -> UnknownMeasurement:
    """The error for a key no measurement has: up to three close matches (difflib), never the whole list.

    Args:
        key: what was asked for.
        keys: the canonical keys of every measurement.
        names: their names, in the same order (a near miss of a bare name suggests its key).
    """
    keys, names = list(keys), list(names)
    by_spelling = {**{name: k for name, k in zip(names, keys)}, **{s: k for k in keys for s in spellings(k)}}
    suggestions: list[str] = []
    for cutoff in (0.85, 0.6):  # a clear near miss alone; else the few that are roughly alike
        close = difflib.get_close_matches(key.strip(), list(by_spelling), n=6, cutoff=cutoff)
        close += difflib.get_close_matches(stripped(key), names, n=3, cutoff=cutoff)
        suggestions = list(dict.fromkeys(by_spelling[c] for c in close))[:3]
        if suggestions:
            break
    hint = f"did you mean {' or '.join(suggestions)}?" if suggestions else "no measurement has a similar name;"
    return UnknownMeasurement(f"unknown measurement {key!r}; {hint} ({len(keys)} measurements: "
                              f"RunAnalysis.measurements() lists them with their titles)")
