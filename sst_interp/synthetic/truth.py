"""What a synthetic run holds, exactly (:class:`PlantedTruth`), for tests to compare analyses against.

The truth's own accessors are computed independently of :mod:`sst_interp.kernels.outcomes` on purpose: they are the oracle
the single definitions are tested against.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sst_interp.synthetic.plan import PlantedArrays, staged
from sst_interp.synthetic.spec import SyntheticSpec


@dataclass
class PlantedTruth(PlantedArrays):
    """Exactly what a synthetic run holds (shapes: Q questions, P = full + sketch positions, I = max depth): the
    :class:`~sst_interp.synthetic.plan.PlantedArrays` of every question stacked (``correct`` is ``[Q, n_depths]``,
    ``swaps`` ``[Q, P, L, I]``, ...), and

    Args:
        spec: the spec it was written from.
        question_ids: [Q] ids, in questions.parquet order.
        depths: the recorded depths.
        kinds: [Q] correctness kind of each question.
        halting_layer: layer of the halting feature.
        halting_dims: its dimensions (empty: no feature).
        tokens: {(question_id, depth): [n_tokens] int32} generated token ids.
    """

    spec: SyntheticSpec
    question_ids: list[str]
    depths: list[int]
    kinds: list[str]
    halting_layer: int
    halting_dims: list[int]
    tokens: dict[tuple[str, int], np.ndarray]

    @property
    def k(self) -> int:
        """The k at which the overlap plant is exact."""
        return self.spec.overlap_k

    def overlap(self, iteration_a: int, iteration_b: int) -> np.ndarray:
        """Exact planted top-k overlap between two iterations: ``[Q, P, L]`` float64."""
        a = self.swaps[..., iteration_a - 1].astype(np.int64)
        b = self.swaps[..., iteration_b - 1].astype(np.int64)
        return 1.0 - np.abs(b - a) / self.k

    def first_divergence(self, question: int, depth_a: int, depth_b: int) -> int | None:
        """First token position where the traces at two depths differ (None: identical)."""
        ta = self.tokens[(self.question_ids[question], depth_a)]
        tb = self.tokens[(self.question_ids[question], depth_b)]
        n = min(ta.size, tb.size)
        diff = np.flatnonzero(ta[:n] != tb[:n])
        if diff.size:
            return int(diff[0])
        return None if ta.size == tb.size else n

    def staged(self, question: int, depth: int) -> bool:
        """Passes at staged depth <= ``depth``."""
        return staged(self.depths, self.correct[question], depth)
