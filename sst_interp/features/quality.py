"""How well dictionaries reconstruct a site's states, per iteration, streamed over the scored questions.

Per iteration i (each state encoded by the dictionary that covers i):

- ``fve``: fraction of variance explained, 1 - sum ||x - x_hat||^2 / sum ||x - mean_i||^2 (mean_i: the mean state
  at iteration i over the scored states; SAELens logs the same ratio as ``explained_variance``);
- ``l0``: mean active features per state;
- ``dead``: features never active at iteration i on the scored states; ``dense``: features active on more than
  :data:`DENSE` of them;
- a shared dictionary also gets ``dead_all`` (never active at any scored iteration: the dictionary's dead features),
  and across the loop: ``jaccard_next``, the mean over features active at i or i + 1 of the Jaccard index of their
  firing sets (the (question, turn, position) states where the feature is active at i, and at i + 1), and
  ``shared_next``, how many features have that index at least :data:`SHARED_JACCARD` (active at both iterations on
  mostly the same tokens); ``births`` (active at i, never at i - 1) and ``deaths`` (active at i - 1, never at i).

The running sums are float64; nothing but one shard file's states and the per-feature counts is in memory.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sst_interp.features.dictionary import DictionarySet
from sst_interp.features.states import SiteRows

#: A feature active on more than this fraction of an iteration's states is dense.
DENSE = 0.1
#: Two iterations share a feature when its firing sets there have at least this Jaccard index.
SHARED_JACCARD = 0.5
#: The columns of :func:`reconstruction_quality`'s table, in order (the shared-only ones are NaN for a set).
QUALITY_COLUMNS = ("iteration", "states", "fve", "l0", "dead", "dense", "dead_all", "jaccard_next", "shared_next",
                   "births", "deaths")


@dataclass
class _Tally:
    """Running sums of one iteration."""

    d: int
    width: int
    states: int = 0
    total: np.ndarray = field(init=False)
    squares: float = 0.0
    errors: float = 0.0
    active: int = 0
    fires: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.total = np.zeros(self.d, dtype=np.float64)
        self.fires = np.zeros(self.width, dtype=np.int64)

    def add(self, x: np.ndarray, x_hat: np.ndarray, on: np.ndarray) -> None:
        wide = x.astype(np.float64)
        self.states += len(x)
        self.total += wide.sum(axis=0)
        self.squares += float((wide ** 2).sum())
        self.errors += float(((wide - x_hat.astype(np.float64)) ** 2).sum())
        self.active += int(on.sum())
        self.fires += on.sum(axis=0)

    def row(self) -> dict[str, float]:
        n = max(self.states, 1)
        variance = self.squares - float(self.total @ self.total) / n
        return {"states": self.states, "fve": 1.0 - self.errors / variance if variance > 0 else float("nan"),
                "l0": self.active / n, "dead": int((self.fires == 0).sum()),
                "dense": int((self.fires > DENSE * self.states).sum())}


def _pairs(part: SiteRows, first: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of ``part`` at iteration ``first`` and ``first + 1`` of the same (question, turn, position)."""
    frame = pd.DataFrame({"q": part.question_id.astype(str), "t": part.turn, "p": part.position,
                          "i": part.iteration, "row": np.arange(len(part))})
    key = ["q", "t", "p"]
    joined = frame[frame.i == first].merge(frame[frame.i == first + 1], on=key, suffixes=("_a", "_b"))
    return joined["row_a"].to_numpy(), joined["row_b"].to_numpy()


def reconstruction_quality(dictionaries: DictionarySet, parts: Iterable[SiteRows],
                           iterations: tuple[int, ...]) -> pd.DataFrame:
    """The per-iteration table (:data:`QUALITY_COLUMNS`) of ``dictionaries`` on the states ``parts`` yields (a
    site's rows, a shard file at a time) at ``iterations``."""
    width = dictionaries.meta.width
    tallies = {i: _Tally(dictionaries.meta.d_in, width) for i in iterations}
    both = {i: np.zeros(width, dtype=np.int64) for i in iterations if i + 1 in iterations}
    either = {i: np.zeros(width, dtype=np.int64) for i in both}
    shared = dictionaries.layout == "shared"
    for part in parts:
        on = np.zeros((len(part), width), dtype=bool)
        for iteration in iterations:
            at = part.iteration == iteration
            if not at.any():
                continue
            dictionary = dictionaries[iteration]
            acts = dictionary.encode(part.values[at])
            x_hat = dictionary.decode(acts).cpu().numpy()
            active = (acts > 0).cpu().numpy()
            on[at] = active
            tallies[iteration].add(part.values[at], x_hat, active)
        if shared:
            for first in both:
                a, b = _pairs(part, first)
                both[first] += (on[a] & on[b]).sum(axis=0)
                either[first] += (on[a] | on[b]).sum(axis=0)
    rows = []
    ever = np.zeros(width, dtype=bool)
    for i in iterations:
        ever |= tallies[i].fires > 0
    for index, i in enumerate(iterations):
        row: dict[str, float] = {"iteration": i, **tallies[i].row()}
        row.update({name: float("nan") for name in QUALITY_COLUMNS[6:]})
        if shared:
            row["dead_all"] = int((~ever).sum())
            if i in both:
                union = either[i] > 0
                jaccard = both[i][union] / either[i][union]
                row["jaccard_next"] = float(jaccard.mean()) if union.any() else float("nan")
                row["shared_next"] = int((jaccard >= SHARED_JACCARD).sum())
            if index > 0:
                before, now = tallies[iterations[index - 1]].fires > 0, tallies[i].fires > 0
                row["births"], row["deaths"] = int((now & ~before).sum()), int((before & ~now).sum())
        rows.append(row)
    return pd.DataFrame(rows, columns=list(QUALITY_COLUMNS))

