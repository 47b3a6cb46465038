"""Top-k overlap of hidden states (paper app:topk_overlap), vectorised, cross-run and within-run.

``overlap_k(u, v) = |topk(u) & topk(v)| / k`` where ``topk(x)`` is the set of the k dimensions with the largest
``|x_i|``; k = 1024 of d = 5376 in the paper, scaled to other widths as ``round(d * 1024 / 5376)``.

- **cross-run**: iteration ``i_a`` of the run at depth ``a`` vs iteration ``i_b`` of the run at depth ``b`` at the
  same (question, position, layer); the paper's default is the iter=1 run vs the last iteration of the iter=N run.
- **within-run**: iteration i vs iteration j of one run (shared token history by construction).

Full-window positions come from hidden blocks; positions beyond it from the sketch blocks (the stored top-k index
sets), when their k equals the requested one. Run-level functions stream one question at a time; several
comparisons can be collected in one pass (``_collect_many``, used by
:func:`~sst_interp.analyses.basin_profiles.punctuated_equilibrium`), which reads each question's shards once for all
of them and widens only the iteration compared (:meth:`~sst_interp.store.Run.hidden_raw`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from sst_interp.analyses import hidden_pass
from sst_interp.analyses.layers import scaled_top_k
from sst_interp.kernels.results import AnalysisResult, NotApplicable
from sst_interp.kernels.errors import UsageError

if TYPE_CHECKING:
    from sst_interp.store import Run

Source = Literal["hidden", "sketch", "both"]


# ---------------------------------------------------------------------------------------------- array level
def topk_indices(values: np.ndarray, k: int, sort: bool = True) -> np.ndarray:
    """Indices of the k largest ``|values|`` along the last axis, sorted ascending (unordered with ``sort=False``,
    which is all an overlap needs).

    ``values: [..., d]`` -> ``[..., k]`` int64 (``numpy.argpartition``; ties at the k-th magnitude are broken
    arbitrarily, as any top-k would).
    """
    values = np.asarray(values)
    d = values.shape[-1]
    if not 1 <= k <= d:
        raise UsageError(f"top-k overlap needs 1 <= k <= d, got k={k} with d={d}")
    mag = np.abs(values)
    if k == d:
        idx = np.broadcast_to(np.arange(d), values.shape).copy()
    else:
        idx = np.argpartition(mag, d - k, axis=-1)[..., d - k:]
    if sort:
        idx.sort(axis=-1)
    return idx


def _membership(indices: np.ndarray, d: int) -> np.ndarray:
    """Boolean ``[..., d]`` mask with True at ``indices: [..., k]``."""
    mask = np.zeros(indices.shape[:-1] + (d,), dtype=bool)
    np.put_along_axis(mask, indices.astype(np.int64), True, axis=-1)
    return mask


def overlap_from_indices(a: np.ndarray, b: np.ndarray, d: int) -> np.ndarray:
    """Overlap of two stacks of top-k index sets: ``a, b: [..., k]`` (broadcastable) -> ``[...]`` float64.

    A set holding a negative index (the reader's fill for a sketch cell with no row) has no overlap: NaN there.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape[-1] != b.shape[-1]:
        raise UsageError(f"index sets have different k ({a.shape[-1]} vs {b.shape[-1]})")
    k = a.shape[-1]
    a, b = np.broadcast_arrays(a, b)
    unrecorded = (a < 0).any(axis=-1) | (b < 0).any(axis=-1)
    # clipped so that a fill of -1 cannot mark index d-1; those sets become NaN below anyway
    shared = (_membership(np.maximum(a, 0), d) & _membership(np.maximum(b, 0), d)).sum(axis=-1)
    return np.where(unrecorded, np.nan, shared / k)


def topk_overlap(u: np.ndarray, v: np.ndarray, k: int) -> np.ndarray:
    """Top-k overlap of ``u, v: [..., d]`` (broadcastable) along the last axis -> ``[...]`` float64."""
    u = np.asarray(u)
    v = np.asarray(v)
    if u.shape[-1] != v.shape[-1]:
        raise UsageError(f"vectors have different widths ({u.shape[-1]} vs {v.shape[-1]})")
    return overlap_from_indices(topk_indices(u, k, sort=False), topk_indices(v, k, sort=False), u.shape[-1])


def within_block_overlap(values: np.ndarray, iteration_a: int, iteration_b: int, k: int) -> np.ndarray:
    """Within-run overlap of one question: ``values: [P, I, L, d]`` (iterations 1-based) -> ``[P, L]``."""
    return topk_overlap(values[:, iteration_a - 1], values[:, iteration_b - 1], k)


# ---------------------------------------------------------------------------------------------- result
@dataclass(frozen=True)
class OverlapResult(AnalysisResult):
    """Top-k overlaps of many questions on a common (position, layer) grid.

    Args:
        kind: "cross-run" or "within-run".
        comparison: e.g. "depth 1 iter 1 vs depth 4 iter 4".
        k: the top-k used.
        hidden_size: d.
        question_ids: [Q] ids.
        positions: [P] generated positions of the grid.
        layers: [L] layers.
        values: [Q, P, L] float64 overlaps; NaN where a question lacks that position (shorter generation).
        full_positions: positions < this came from full hidden states, the rest from sketches.
    """

    kind: str
    comparison: str
    k: int
    hidden_size: int
    question_ids: tuple[str, ...]
    positions: np.ndarray
    layers: np.ndarray
    values: np.ndarray
    full_positions: int
    label = "app:topk_overlap"

    @property
    def valid(self) -> np.ndarray:
        """[Q, P] bool: the question has that position (at some layer: a latent-iteration family's layers outside
        its loop have no overlap between iterations, NaN)."""
        return ~np.isnan(self.values).all(axis=2)

    def flat(self) -> np.ndarray:
        """Every recorded (question, position, layer) overlap as a 1-D array (NaNs dropped)."""
        v = self.values.reshape(-1)
        return v[~np.isnan(v)]

    def restrict(self, positions: Sequence[int] | None = None, question_ids: Sequence[str] | None = None
                 ) -> OverlapResult:
        """The same result on a subset of positions and/or questions."""
        pos_mask = np.ones(self.positions.size, bool) if positions is None else np.isin(self.positions, positions)
        q_mask = np.ones(len(self.question_ids), bool) if question_ids is None else \
            np.isin(np.array(self.question_ids), list(question_ids))
        return OverlapResult(self.kind, self.comparison, self.k, self.hidden_size,
                             tuple(np.array(self.question_ids)[q_mask].tolist()), self.positions[pos_mask],
                             self.layers, self.values[q_mask][:, pos_mask], self.full_positions)

    def table(self) -> pd.DataFrame:
        """Long form: question_id, position, layer, overlap (recorded cells only)."""
        q, p, l = np.meshgrid(np.arange(len(self.question_ids)), np.arange(self.positions.size),
                              np.arange(self.layers.size), indexing="ij")
        keep = ~np.isnan(self.values)
        return pd.DataFrame({
            "question_id": np.array(self.question_ids, dtype=object)[q[keep]],
            "position": self.positions[p[keep]],
            "layer": self.layers[l[keep]],
            "overlap": self.values[keep],
        })


# ---------------------------------------------------------------------------------------------- run level
def _resolve_k(run: Run, k: int | None, source: Source) -> int:
    k = scaled_top_k(run.hidden_size) if k is None else int(k)
    sketch_k = int(run.manifest.get("sketch_k") or 0)
    if source in ("sketch", "both") and int(run.manifest.get("sketch_positions") or 0) > 0 and k != sketch_k:
        raise UsageError(f"the run's sketches store top-{sketch_k} index sets; overlap from sketches needs "
                         f"k={sketch_k} (got k={k}); pass k={sketch_k} or source='hidden'")
    return k


@dataclass(frozen=True)
class _Plan:
    """One comparison to collect: (depth, iteration) a vs b over ``question_ids``."""

    pairs: tuple[tuple[int, int], tuple[int, int]]
    question_ids: tuple[str, ...]
    k: int
    source: Source
    turn: int
    kind: str
    comparison: str
    positions: tuple[int, ...] | None


@dataclass
class _TopK:
    """{position: [L, k] top-k index sets} of one question at one (depth, iteration).

    ``stack`` ([P, L, k]) and ``rows`` ({position: row of stack}) are set when every set is a row of one
    :func:`topk_indices` result of hidden states (k distinct indices in [0, d)): then overlaps are counted by the
    faster :func:`_distinct_overlap`, on whole arrays."""

    sets: dict[int, np.ndarray]
    stack: np.ndarray | None = None
    rows: dict[int, int] | None = None

    def take(self, positions: list[int]) -> np.ndarray:
        """[len(positions), L, k] of ``stack`` (no copy when it is the whole stack, in order)."""
        assert self.stack is not None and self.rows is not None
        at = [self.rows[p] for p in positions]
        return self.stack if at == list(range(len(self.stack))) else self.stack[at]


def _top_of_magnitudes(mag: np.ndarray, k: int) -> np.ndarray:
    """:func:`topk_indices` ``(values, k, sort=False)`` of values whose ``|values|`` is ``mag`` (no second abs)."""
    d = mag.shape[-1]
    if not 1 <= k <= d:
        raise UsageError(f"top-k overlap needs 1 <= k <= d, got k={k} with d={d}")
    if k == d:
        return np.broadcast_to(np.arange(d), mag.shape).copy()
    return np.argpartition(mag, d - k, axis=-1)[..., d - k:]


def _distinct_overlap(a: np.ndarray, b: np.ndarray, d: int) -> np.ndarray:
    """:func:`overlap_from_indices` of index sets of k *distinct* indices in [0, d) (top-k sets): ``a, b: [..., k]``
    of one shape -> ``[...]``; the same counts, from one flat membership mask of ``a`` looked up at ``b``."""
    k = a.shape[-1]
    sets = int(np.prod(a.shape[:-1]))
    offset = (np.arange(sets, dtype=np.int64) * d).reshape(a.shape[:-1] + (1,))  # row r's cells start at r * d
    mask = np.zeros(sets * d, dtype=bool)
    mask[(a + offset).reshape(-1)] = True
    return mask[(b + offset).reshape(-1)].reshape(b.shape).sum(axis=-1) / k


def _raw_blocks(run: Run, depth: int, qid: str, turn: int, positions: Sequence[int] | None) -> list[Any]:
    """The question's hidden blocks as stored (:meth:`Run.hidden_raw`; a stand-in with only ``hidden`` is wrapped)."""
    if hasattr(run, "hidden_raw"):
        return list(run.hidden_raw(depth, question_ids=[qid], turn=turn, positions=positions))
    from sst_interp.store.blocks import RawHiddenBlock

    return [RawHiddenBlock(b.question_id, b.turn, b.positions, b.iterations, b.layers,
                           np.asarray(b.values, dtype=np.float32), "float32", not np.isnan(b.values).any())
            for b in run.hidden(depth, question_ids=[qid], turn=turn, positions=positions)]


class _QuestionReads:
    """One question's hidden reads and top-k sets, shared by every comparison of a pass: each (depth, turn) is read
    once when a comparison needs its full window, and a comparison restricted to some positions takes them from
    that read (only when its blocks are complete, so the subset is exactly what a filtered read returns)."""

    def __init__(self, run: Run, qid: str) -> None:
        self.run = run
        self.qid = qid
        self._hidden: dict[tuple, list[Any]] = {}
        self._topk: dict[tuple, _TopK] = {}

    def _blocks(self, depth: int, turn: int, positions: tuple[int, ...] | None) -> list[Any]:
        key = (depth, turn, positions)
        if key not in self._hidden:
            blocks = _raw_blocks(self.run, depth, self.qid, turn, positions)
            if positions is None:
                for block in blocks:
                    hidden_pass.note_block(self.run, depth, block)
            self._hidden[key] = blocks
        return self._hidden[key]

    def hidden(self, depth: int, iteration: int, k: int, turn: int, positions: tuple[int, ...] | None) -> _TopK:
        """Top-k sets of the hidden states at (depth, iteration): the top-k of ``|values|`` at every position and
        layer (:func:`topk_indices` with ``sort=False``, on the same float32 magnitudes, so the same sets)."""
        key = (depth, iteration, k, turn, positions)
        if key in self._topk:
            return self._topk[key]
        full = self._topk.get((depth, iteration, k, turn, None))
        if positions is not None and full is not None and all(b.complete for b in self._hidden[(depth, turn, None)]):
            wanted = set(positions)
            rows = None if full.rows is None else {p: j for p, j in full.rows.items() if p in wanted}
            grid = _TopK({p: v for p, v in full.sets.items() if p in wanted}, full.stack, rows)
        else:
            sets: dict[int, np.ndarray] = {}
            blocks = self._blocks(depth, turn, positions)
            for block in blocks:
                it = np.flatnonzero(block.iterations == iteration)
                if it.size == 0:
                    raise UsageError(f"depth {depth} run has no iteration {iteration} "
                                     f"(has {block.iterations.tolist()})")
                magnitudes = block.magnitudes((slice(None), int(it[0])))  # [P, L, d]
                idx = _top_of_magnitudes(magnitudes, k)  # [P, L, k]
                if not block.complete:
                    # a cell the run never visited (a family's layer outside its loop at iteration >= 2) is NaN:
                    # its set is the reader's unrecorded fill, so its overlap is NaN, not a top-k of NaNs
                    idx[np.isnan(magnitudes).any(axis=-1)] = -1
                for j, pos in enumerate(block.positions.tolist()):
                    sets[int(pos)] = idx[j]
            grid = _TopK(sets)
            if len(blocks) == 1:  # one turn: every set is a row of idx
                grid = _TopK(sets, idx, {int(p): j for j, p in enumerate(blocks[0].positions.tolist())})
        self._topk[key] = grid
        return grid

    def grid(self, depth: int, iteration: int, source: Source, k: int, turn: int,
             positions: tuple[int, ...] | None) -> _TopK:
        """{position: [L, k] top-k index sets} of the question at one (depth, iteration): full-window positions
        from hidden states, the rest from sketches (``source``)."""
        if source == "hidden":
            return self.hidden(depth, iteration, k, turn, positions)
        out: dict[int, np.ndarray] = {}
        if source == "both":
            out.update(self.hidden(depth, iteration, k, turn, positions).sets)
        wanted = None if positions is None else set(positions)
        for block in self.run.sketch(depth, question_ids=[self.qid], turn=turn):
            it = np.flatnonzero(block.iterations == iteration)
            if it.size == 0:
                continue
            for j, pos in enumerate(block.positions.tolist()):
                if wanted is None or pos in wanted:
                    out.setdefault(int(pos), block.top_indices[j, it[0]])
        return _TopK(out)


def _question_overlaps(reads: _QuestionReads, plan: _Plan, d: int) -> dict[int, np.ndarray]:
    """{position: [L] overlaps} of one question for one plan."""
    (depth_a, it_a), (depth_b, it_b) = plan.pairs
    grid_a = reads.grid(depth_a, it_a, plan.source, plan.k, plan.turn, plan.positions)
    grid_b = grid_a if (depth_a, it_a) == (depth_b, it_b) else \
        reads.grid(depth_b, it_b, plan.source, plan.k, plan.turn, plan.positions)
    common = sorted(set(grid_a.sets) & set(grid_b.sets))
    if common and grid_a.stack is not None and grid_b.stack is not None and \
            grid_a.stack.shape[1:] == grid_b.stack.shape[1:]:
        sets_a, sets_b = grid_a.take(common), grid_b.take(common)
        if sets_a.min() >= 0 and sets_b.min() >= 0:  # no unrecorded cell: the fast count is exact
            ov = _distinct_overlap(sets_a, sets_b, d)  # [C, L]
            return {p: ov[j] for j, p in enumerate(common)}
    return {p: overlap_from_indices(grid_a.sets[p], grid_b.sets[p], d) for p in common}


def _assemble(run: Run, plan: _Plan, per_question: list[dict[int, np.ndarray]]) -> OverlapResult | NotApplicable:
    grid = np.array(sorted({p for row in per_question for p in row}), dtype=np.int64)
    if grid.size == 0:
        return NotApplicable(f"no recorded positions to compare for {plan.comparison} (source={plan.source})",
                             "app:topk_overlap")
    layers = np.arange(run.num_layers)
    values = np.full((len(plan.question_ids), grid.size, layers.size), np.nan)
    col = {int(p): j for j, p in enumerate(grid)}
    for qi, row in enumerate(per_question):
        for p, ov in row.items():
            values[qi, col[p], :ov.shape[0]] = ov
    full = int(run.manifest.get("full_positions") or 0)
    return OverlapResult(plan.kind, plan.comparison, plan.k, run.hidden_size, plan.question_ids, grid, layers, values,
                         full)


class _Failed:
    """A plan whose collection raised: the error is raised again when its result is asked for."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _collect_many(run: Run, plans: Sequence[_Plan | NotApplicable | _Failed]) -> list[Any]:
    """Collect several comparisons in one pass over the questions (each question's shards read once for all of
    them). Returns, per plan, its OverlapResult / NotApplicable, or a :class:`_Failed` holding the error the plan
    raised (the first, in question order, as collecting it alone would raise)."""
    live = {i: p for i, p in enumerate(plans) if isinstance(p, _Plan)}
    results: list[Any] = list(plans)
    rows: dict[int, list[dict[int, np.ndarray]]] = {i: [] for i in live}
    members = {i: set(p.question_ids) for i, p in live.items()}
    order = sorted(live, key=lambda i: live[i].positions is not None)  # full-window reads first, then subsets
    ids = list(dict.fromkeys(q for i in live for q in live[i].question_ids))
    for qid in ids:
        reads = _QuestionReads(run, qid)
        for i in order:
            if i not in live or qid not in members[i]:
                continue
            try:
                rows[i].append(_question_overlaps(reads, live[i], run.hidden_size))
            except Exception as err:  # noqa: BLE001 - handed back to the caller of this plan, unchanged
                results[i] = _Failed(err)
                del live[i]
        if not live:
            break
    for i, plan in live.items():
        by_id = dict(zip([q for q in ids if q in members[i]], rows[i]))
        results[i] = _assemble(run, plan, [by_id[q] for q in plan.question_ids])
    return results


def _unwrap(result: Any) -> OverlapResult | NotApplicable:
    if isinstance(result, _Failed):
        raise result.error
    return result


def _cross_plan(run: Run, depth_a: int | None = None, depth_b: int | None = None, iteration_a: int | None = None,
                iteration_b: int | None = None, k: int | None = None, source: Source = "hidden",
                question_ids: Sequence[str] | None = None, turn: int = 0, positions: Sequence[int] | None = None
                ) -> _Plan | NotApplicable:
    depths = run.depths
    if len(depths) < 2 and (depth_a is None or depth_b is None):
        return NotApplicable(f"run has a single depth ({depths}); cross-run overlap needs two", "app:topk_overlap")
    depth_a = depths[0] if depth_a is None else int(depth_a)
    depth_b = depths[-1] if depth_b is None else int(depth_b)
    for d in (depth_a, depth_b):
        if d not in depths:
            raise UsageError(f"depth {d} is not in the run (depths {depths})")
    iteration_a = depth_a if iteration_a is None else int(iteration_a)
    iteration_b = depth_b if iteration_b is None else int(iteration_b)
    k = _resolve_k(run, k, source)
    ids = [q for q in run.question_ids(depth_a) if q in set(run.question_ids(depth_b))]
    if question_ids is not None:
        ids = [q for q in ids if q in set(question_ids)]
    if not ids:
        return NotApplicable(f"no question is complete at both depth {depth_a} and {depth_b}", "app:topk_overlap")
    comparison = f"depth {depth_a} iter {iteration_a} vs depth {depth_b} iter {iteration_b}"
    return _Plan(((depth_a, iteration_a), (depth_b, iteration_b)), tuple(ids), k, source, turn, "cross-run",
                 comparison, _positions(positions))


def _within_plan(run: Run, depth: int | None = None, iteration_a: int = 1, iteration_b: int | None = None,
                 k: int | None = None, source: Source = "hidden", question_ids: Sequence[str] | None = None,
                 turn: int = 0, positions: Sequence[int] | None = None) -> _Plan | NotApplicable:
    depth = run.depths[-1] if depth is None else int(depth)
    if depth not in run.depths:
        raise UsageError(f"depth {depth} is not in the run (depths {run.depths})")
    iteration_b = depth if iteration_b is None else int(iteration_b)
    if depth < 2 or iteration_a == iteration_b:
        return NotApplicable(f"depth {depth} run has no second iteration to compare with iteration {iteration_a}",
                             "app:topk_overlap")
    if not (1 <= iteration_a <= depth and 1 <= iteration_b <= depth):
        raise UsageError(f"iterations must lie in 1..{depth}, got {iteration_a} and {iteration_b}")
    k = _resolve_k(run, k, source)
    ids = run.question_ids(depth) if question_ids is None else \
        [q for q in run.question_ids(depth) if q in set(question_ids)]
    if not ids:
        return NotApplicable(f"no question is complete at depth {depth}", "app:topk_overlap")
    comparison = f"depth {depth} iter {iteration_a} vs iter {iteration_b}"
    return _Plan(((depth, iteration_a), (depth, iteration_b)), tuple(ids), k, source, turn, "within-run", comparison,
                 _positions(positions))


def _positions(positions: Sequence[int] | None) -> tuple[int, ...] | None:
    return None if positions is None else tuple(sorted({int(p) for p in np.atleast_1d(positions).tolist()}))


def cross_run_overlap(run: Run, depth_a: int | None = None, depth_b: int | None = None,
                      iteration_a: int | None = None, iteration_b: int | None = None, k: int | None = None,
                      source: Source = "hidden", question_ids: Sequence[str] | None = None, turn: int = 0,
                      positions: Sequence[int] | None = None) -> OverlapResult | NotApplicable:
    """Overlap between the run at ``depth_a`` and the run at ``depth_b`` at the same (question, position, layer).

    Defaults: the smallest depth's last iteration vs the largest depth's last iteration (iter=1 vs iter=4 in the
    paper). Questions complete at both depths; ``source`` picks hidden states, sketches or both; ``positions``
    restricts the grid.
    """
    plan = _cross_plan(run, depth_a, depth_b, iteration_a, iteration_b, k, source, question_ids, turn, positions)
    return _unwrap(_collect_many(run, [plan])[0])


def within_run_overlap(run: Run, depth: int | None = None, iteration_a: int = 1, iteration_b: int | None = None,
                       k: int | None = None, source: Source = "hidden", question_ids: Sequence[str] | None = None,
                       turn: int = 0, positions: Sequence[int] | None = None) -> OverlapResult | NotApplicable:
    """Overlap between iterations ``iteration_a`` and ``iteration_b`` (default: the last) of the run at ``depth``
    (default: the largest)."""
    plan = _within_plan(run, depth, iteration_a, iteration_b, k, source, question_ids, turn, positions)
    return _unwrap(_collect_many(run, [plan])[0])
