"""The reference states of ``patch``, ``mean`` and ``resample``: states recorded in a run directory.

:class:`PatchSource` reads a question's recorded states one (question, turn) at a time (``resample`` draws another
question of the run, the same one for the same seed); :class:`MeanSource` averages a run's recorded states over its
questions. :func:`reference_values` gives the state an operation puts at one site for every row, which the
:class:`~sst_interp.interventions.apply.Intervener` reads during generation and :class:`ReferenceStates` outside it
(attribution patching's estimates).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from sst_interp.interventions.checks import check_spec, recorded_questions
from sst_interp.interventions.spec import READS_RUN, Intervention, InterventionSpec, Operation, Site
from sst_interp.kernels.errors import UsageError
from sst_interp.store import Run


def reference_values(operation: Operation, source: Any, question_ids: Sequence[str | None] | None,
                     generated_depth: int, turn: int, position: int, iteration: int, layer: int,
                     active: torch.Tensor | None) -> torch.Tensor:
    """[B, d] float32: the state a ``patch``, ``mean`` or ``resample`` ``operation`` reads from ``source`` (its
    :class:`PatchSource` or :class:`MeanSource`) for each row at (turn, position, iteration, layer) of a
    generation at ``generated_depth``; ``iteration`` is the generated one (``source_iteration`` overrides it). Rows
    that are inactive or whose question id is None get zeros under patch and resample."""
    if operation.kind == "mean":
        rows = len(question_ids) if question_ids is not None else int(active.shape[0]) if active is not None else 1
        return source.value(generated_depth, turn, position, iteration, layer)[None, :].expand(rows, -1)
    assert question_ids is not None
    questions = (list(question_ids) if operation.kind in ("patch", "feature")
                 else [None if q is None else source.other(q, operation.seed or 0, operation.depth or generated_depth,
                                                           turn, position) for q in question_ids])
    return source.values(questions, generated_depth, turn, position, operation.source_iteration or iteration, layer,
                         active)


class ReferenceStates:
    """The states a ``patch``, ``mean`` or ``resample`` operation would put at ``layer_out`` sites, read outside a
    generation (attribution patching's estimates take the difference to the clean states). The spec's checks
    (:func:`~sst_interp.interventions.checks.check_spec`) apply as for an
    :class:`~sst_interp.interventions.apply.Intervener`."""

    def __init__(self, operation: Operation, num_layers: int, hidden_size: int, site: Site | None = None) -> None:
        if operation.kind not in READS_RUN or operation.live:
            raise UsageError(f"a reference state comes from a recorded run: use {', '.join(READS_RUN)} with run, not "
                             f"{operation.kind!r}" + (f" with source {operation.source!r}" if operation.live else ""))
        check_spec(InterventionSpec((Intervention(site or Site("layer_out"), operation),)), num_layers, hidden_size)
        self.operation = operation
        self.source = MeanSource(operation) if operation.kind == "mean" else PatchSource(operation)

    def values(self, question_ids: Sequence[str | None], generated_depth: int, turn: int, position: int,
               iteration: int, layer: int) -> torch.Tensor:
        """[B, d] float32 (:func:`reference_values`; rows whose id is None are zeros)."""
        return reference_values(self.operation, self.source, question_ids, generated_depth, turn, position,
                                iteration, layer, None)


class PatchSource:
    """States recorded in a run directory, read one question (and turn) at a time, kept while in use."""

    def __init__(self, operation: Operation) -> None:
        self.run = Run.open(str(operation.run))
        self.depth = operation.depth
        self._cache: dict[tuple[str, int, int], Any] = {}
        self._questions: list[str] | None = None

    def _block(self, question_id: str, depth: int, turn: int) -> Any:
        key = (question_id, depth, turn)
        if key not in self._cache:
            if depth not in self.run.depths:
                raise UsageError(f"patch: {self.run.path} has no depth {depth} (it holds {self.run.depths})")
            blocks = list(self.run.hidden(depth, question_ids=[question_id], turn=turn))
            if not blocks:
                raise UsageError(f"patch: {self.run.path} has no hidden states of question {question_id!r}, turn "
                                 f"{turn}, at depth {depth}")
            if len(self._cache) > 64:  # one batch's questions at a time; older ones are done
                self._cache.clear()
            self._cache[key] = blocks[0]
        return self._cache[key]

    def other(self, question_id: str, seed: int, depth: int | None = None, turn: int = 0,
              position: int | None = None) -> str:
        """Another question of the run for ``question_id``, the same for the same (question, seed). Given a
        ``depth`` and ``position``: the first question of that fixed draw order that recorded the position there
        (answers that ended early recorded fewer positions), so a resample never lands on a missing state."""
        if self._questions is None:
            self._questions = recorded_questions(self.run)
        others = [q for q in self._questions if q != question_id]
        rng = np.random.default_rng([int(seed), zlib.crc32(question_id.encode())])
        first = int(rng.integers(len(others)))
        if position is None or depth is None:
            return others[first]
        rest = [others[i] for i in rng.permutation([i for i in range(len(others)) if i != first])]
        for candidate in [others[first], *rest]:
            if position in self._block(candidate, depth, turn).positions:
                return candidate
        raise UsageError(f"resample: no other question of {self.run.path} recorded position {position} (turn {turn}, "
                         f"depth {depth}); record the reference run with more --full-positions")

    def values(self, question_ids: Sequence[str | None], generated_depth: int, turn: int, position: int, iteration: int,
               layer: int, active: torch.Tensor | None) -> torch.Tensor:
        """[B, d] float32: each active row's recorded state at (turn, position, iteration, layer)."""
        depth = self.depth or generated_depth
        rows = []
        for row, question_id in enumerate(question_ids):
            if question_id is None or (active is not None and not bool(active[row])):
                rows.append(None)
                continue
            block = self._block(question_id, depth, turn)
            where = (np.flatnonzero(block.positions == position), np.flatnonzero(block.iterations == iteration),
                     np.flatnonzero(block.layers == layer))
            if any(len(w) == 0 for w in where):
                raise UsageError(f"patch: {self.run.path} recorded no hidden state of question {question_id!r} at "
                                 f"turn {turn}, position {position}, iteration {iteration}, layer {layer} (depth "
                                 f"{depth}; full positions are 0-{int(block.positions.max())})")
            value = block.values[where[0][0], where[1][0], where[2][0]]
            if np.isnan(value).any():
                raise UsageError(f"patch: the state of question {question_id!r} at position {position}, iteration "
                                 f"{iteration}, layer {layer} was not recorded in {self.run.path}")
            rows.append(torch.from_numpy(np.ascontiguousarray(value)))
        d = next(r.shape[0] for r in rows if r is not None) if any(r is not None for r in rows) else 0
        return torch.stack([r if r is not None else torch.zeros(d) for r in rows])


class MeanSource:
    """The mean over a run's questions of its recorded states, per (depth, turn): summed one question at a time, so
    memory is one [positions, iterations, layers, d] sum whatever the question count. Questions whose answers
    ended early (an end-of-sequence token) recorded fewer positions: each position's mean is over the questions that
    reached it."""

    def __init__(self, operation: Operation) -> None:
        self.run = Run.open(str(operation.run))
        self.depth = operation.depth
        self._means: dict[tuple[int, int], Any] = {}

    def _mean(self, depth: int, turn: int) -> Any:
        """((iterations, layers), {position: sum [iterations, layers, d]}, {position: count [iterations, layers]})
        of one (depth, turn), computed once."""
        key = (depth, turn)
        if key not in self._means:
            if depth not in self.run.depths:
                raise UsageError(f"mean: {self.run.path} has no depth {depth} (it holds {self.run.depths})")
            axes = None
            totals: dict[int, np.ndarray] = {}
            counts: dict[int, np.ndarray] = {}
            for block in self.run.hidden(depth, turn=turn):
                values = block.values.astype(np.float64)
                if axes is None:
                    axes = (np.asarray(block.iterations), np.asarray(block.layers))
                if not (np.array_equal(block.iterations, axes[0]) and np.array_equal(block.layers, axes[1])):
                    raise UsageError(f"mean: {self.run.path} holds blocks of different iterations or layers at "
                                     f"depth {depth}, turn {turn}; record it with one setting")
                for row, position in enumerate(np.asarray(block.positions).tolist()):
                    seen = ~np.isnan(values[row]).any(axis=-1)
                    if position not in totals:
                        totals[position], counts[position] = np.zeros(values.shape[1:]), np.zeros(seen.shape)
                    totals[position] += np.where(seen[..., None], values[row], 0.0)
                    counts[position] += seen
            if axes is None:
                raise UsageError(f"mean: {self.run.path} has no hidden states at depth {depth}, turn {turn}")
            self._means[key] = (axes, totals, counts)
        return self._means[key]

    def value(self, generated_depth: int, turn: int, position: int, iteration: int, layer: int) -> torch.Tensor:
        """[d] float64: the mean state at (turn, position, iteration, layer), rounded once, to the model's dtype, by
        the operation that puts it (a float64 family run receives the mean itself)."""
        depth = self.depth or generated_depth
        (iterations, layers), totals, counts = self._mean(depth, turn)
        where = (np.flatnonzero(iterations == iteration), np.flatnonzero(layers == layer))
        n = counts[position][where[0][0], where[1][0]] if position in totals and all(len(w) for w in where) else 0
        if n == 0:
            raise UsageError(f"mean: {self.run.path} recorded no hidden state at turn {turn}, position {position}, "
                             f"iteration {iteration}, layer {layer} (depth {depth})")
        return torch.from_numpy(totals[position][where[0][0], where[1][0]] / n)
