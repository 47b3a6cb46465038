"""How many sites each rule of a spec changed: per batch while recording, summed over a run's batches after.

A site is one (row, position, iteration, layer) where a rule's operation ran (for ``patch`` and ``resample``, a row
whose question is patched). A rule whose site never fires (an iteration beyond the depth, a ``state_in`` of a layer
without a state stream, ``set_alpha`` at a pass that reads no state) would record an "intervened" run in which
nothing changed; ``record`` refuses that on its first batch unless ``--allow-empty-sites``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sst_interp.kernels.errors import UsageError

#: the key of a batch's manifest entry that holds its site counts
SITES_KEY = "intervention_sites"


@dataclass
class SiteTally:
    """The site report of the latest batch (:meth:`Intervener.site_report`), taken once per batch."""

    latest: list[dict[str, Any]] | None = field(default=None)

    def add(self, report: list[dict[str, Any]]) -> None:
        """Keep a batch's report (a batch generates under one Intervener)."""
        self.latest = [dict(row) for row in report]

    def take(self) -> list[dict[str, Any]] | None:
        """The latest batch's report, and forget it."""
        report, self.latest = self.latest, None
        return report


def require_sites(report: list[dict[str, Any]] | None, allow_empty: bool) -> None:
    """UsageError (one line) naming the rules of ``report`` that changed no site, unless ``allow_empty``."""
    if allow_empty or not report:
        return
    empty = [row for row in report if int(row["sites"]) == 0]
    if empty:
        names = ", ".join(f"rule {row['rule']} ({row['operation']} on {row['stream']})" for row in empty)
        raise UsageError(f"the intervention's {names} changed no (row, position, iteration, layer) site in the first "
                         f"batch: check its iterations against the depth, its layers against the stateful ones, and "
                         f"its positions against --max-new-tokens; or pass --allow-empty-sites to record anyway")


def run_site_counts(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Per rule, the sites it changed over every committed batch of a run (its manifest); [] without counts."""
    totals: dict[int, dict[str, Any]] = {}
    for entries in manifest.get("batches", {}).values():
        for entry in entries:
            for row in entry.get(SITES_KEY) or []:
                total = totals.setdefault(int(row["rule"]), {**row, "sites": 0})
                total["sites"] += int(row["sites"])
    return [totals[rule] for rule in sorted(totals)]
