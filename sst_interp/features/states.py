"""A site's states streamed from a run, a shard file at a time (:meth:`~sst_interp.store.reader.Run.hidden_rows`),
never the whole run in memory; and the held-out questions, chosen by a hash so that every reader agrees without a
list.

A question is held out when the first 8 bytes of ``sha256("<seed>:<question id>")``, read as a fraction of 2**64,
fall below the held-out fraction: the choice depends on the question alone, so a run that gains questions keeps
the old ones on their side, and evaluation finds the same questions the training left out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from functools import lru_cache
from dataclasses import dataclass
from typing import Literal

import numpy as np

from sst_interp.features.sites import StateSite
from sst_interp.store import Run

#: Which questions of a run a reader takes: the training ones, the held-out ones, or all.
Part = Literal["train", "heldout", "all"]


@lru_cache(maxsize=1 << 20)  # a training stream asks again at every pass over the run
def held_out(question_id: str, fraction: float, seed: int) -> bool:
    """Whether ``question_id`` is held out at ``fraction`` under ``seed`` (module docstring)."""
    digest = hashlib.sha256(f"{int(seed)}:{question_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64 < float(fraction)


@dataclass(frozen=True)
class Split:
    """The questions a reader takes: ``part`` of the run under the held-out ``fraction`` and ``seed``."""

    part: Part = "all"
    fraction: float = 0.0
    seed: int = 0

    def keep(self, question_ids: np.ndarray) -> np.ndarray:
        """[N] bool: which of ``question_ids`` [N] (object, str) this split takes."""
        if self.part == "all":
            return np.ones(len(question_ids), dtype=bool)
        unique, inverse = np.unique(question_ids.astype(str), return_inverse=True)
        out = np.array([held_out(q, self.fraction, self.seed) for q in unique], dtype=bool)[inverse]
        return out if self.part == "heldout" else ~out


@dataclass(frozen=True)
class SiteRows:
    """States of a site from one shard file.

    Args:
        question_id: [N] object (str).
        turn, position, iteration: [N] int64 coordinates.
        values: [N, d] float32.
    """

    question_id: np.ndarray
    turn: np.ndarray
    position: np.ndarray
    iteration: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return int(self.values.shape[0])


def site_rows(run: Run, site: StateSite, split: Split = Split(), iterations: tuple[int, ...] | None = None,
              question_ids: set[str] | None = None) -> Iterator[SiteRows]:
    """Yield the states of ``site`` (at ``iterations``, default the site's) of the questions ``split`` takes (and,
    when given, only ``question_ids``), one shard file at a time, in the run's file order."""
    for chunk in run.hidden_rows(site.depth, layers=[site.layer], iterations=iterations or site.iterations):
        keep = split.keep(chunk.question_id)
        if question_ids is not None:
            keep &= np.isin(chunk.question_id.astype(str), np.asarray(sorted(question_ids), dtype=str))
        if not keep.any():
            continue
        yield SiteRows(chunk.question_id[keep], chunk.turn[keep], chunk.position[keep], chunk.iteration[keep],
                       chunk.values[keep])
