"""The position view: what the iterations did at one generated position of one (question, depth, turn).

- **Top-k overlap heatmap** (iteration transition x layer): the overlap of consecutive iterations' top-k |value|
  sets (:func:`sst_interp.analyses.overlap.topk_overlap`, k = the paper's 1024 of 5376 scaled to d) from the full
  hidden states; beyond the full window, from the recorded top-k sketches
  (:func:`~sst_interp.analyses.overlap.overlap_from_indices`).
- **Low-overlap regime**: the basins comparison of sec:punctuated_equilibrium at this position, the smallest
  depth's iteration 1 against the deepest depth's last iteration, per layer; the position is low-overlap when some
  layer is below the GMM threshold (:func:`sst_interp.analyses.basins.classify_positions`, rule "any").
- **State L2** per iteration: ``||h_{i+1} - h_i||`` per layer (:func:`sst_interp.analyses.hidden_pass.l2_deltas`)
  and ``||h_i||``.
- **Logit lens per iteration**: the recorded output distribution after every iteration (top-N and log-probs,
  entropy) and the tracked log-probs of the iteration-1 top-N.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sst_interp.analyses.basins import classify_positions
from sst_interp.analyses.hidden_pass import l2_deltas
from sst_interp.analyses.layers import scaled_top_k
from sst_interp.analyses.overlap import overlap_from_indices, topk_overlap
from sst_interp.kernels.errors import UsageError
from sst_interp.explore.arrays import plain
from sst_interp.explore.question import check_question, token_detail
from sst_interp.explore.source import RunSource
from sst_interp.kernels.outcomes import NEVER, first_divergence
from sst_interp.store import Run


def _states(run: Run, qid: str, depth: int, turn: int, position: int) -> tuple[str, np.ndarray, np.ndarray, int]:
    """(source, iterations [I], per-iteration states, k): full states ``[I, L, d]`` float32 ("hidden"), else the
    sketch's top-k index sets ``[I, L, k]`` ("sketch"); raises UsageError when neither holds the position."""
    for block in run.hidden(depth, [qid], turn=turn, positions=[position]):
        if block.positions.size:
            return "hidden", block.iterations, block.values[0], scaled_top_k(run.hidden_size)
    for block in run.sketch(depth, [qid], turn=turn):
        where = block.positions.tolist()
        if position in where:
            top = block.top_indices[where.index(position)]
            return "sketch", block.iterations, top, int(top.shape[-1])
    raise UsageError(f"position {position} of {qid!r} depth {depth} turn {turn} has neither full states nor a "
                     f"sketch (the run records {run.manifest.get('full_positions')} full and "
                     f"{run.manifest.get('sketch_positions')} sketch positions)")


def _cached_states(source: RunSource, qid: str, depth: int, turn: int, position: int
                   ) -> tuple[str, np.ndarray, np.ndarray, int]:
    """:func:`_states` through the source's cache (the position view and its regime read the same blocks)."""
    return source.block(("states", qid, depth, turn, position), lambda r: _states(r, qid, depth, turn, position))


def _consecutive_overlap(kind: str, states: np.ndarray, k: int, d: int) -> np.ndarray:
    """``[I-1, L]`` overlap of iteration i with i+1."""
    if states.shape[0] < 2:
        return np.zeros((0, states.shape[1]))
    if kind == "sketch":
        return overlap_from_indices(states[:-1], states[1:], d)  # NaN where a set was not recorded
    overlap = topk_overlap(np.nan_to_num(states[:-1]), np.nan_to_num(states[1:]), k)
    # an iteration a per-position depth policy did not run is NaN in the block: no overlap there
    missing = np.isnan(states).any(axis=-1)  # [I, L]
    return np.where(missing[:-1] | missing[1:], np.nan, overlap)


def _regime(source: RunSource, qid: str, turn: int, position: int, depth: int | None = None) -> dict[str, Any]:
    """The basins comparison at this position: the smallest depth's iteration 1 against the last iteration of the
    depth on screen (the deepest depth when that is the smallest)."""
    run = source.run
    if len(run.depths) < 2:
        return {"available": False, "reason": f"the run has a single depth ({run.depths}); the regime compares two"}
    lo = run.depths[0]
    hi = depth if depth is not None and depth in run.depths and depth != lo else run.depths[-1]
    if qid not in run.question_ids(lo) or qid not in run.question_ids(hi):
        return {"available": False, "reason": f"the question is not recorded at depths {lo} and {hi} yet"}
    kind_lo, _, lo_states, k = _cached_states(source, qid, lo, turn, position)
    kind_hi, _, hi_states, _ = _cached_states(source, qid, hi, turn, position)
    if kind_lo != kind_hi:
        return {"available": False, "reason": "the two depths hold this position in different forms"}
    first, last = lo_states[0], hi_states[hi_states.shape[0] - 1]
    if kind_lo == "hidden":
        per_layer = topk_overlap(np.nan_to_num(first), np.nan_to_num(last), k)
        # a layer not visited at a compared iteration (a family's layer outside its loop) has no overlap there
        per_layer = np.where(np.isnan(first).any(axis=-1) | np.isnan(last).any(axis=-1), np.nan, per_layer)
    else:
        per_layer = overlap_from_indices(first, last, run.hidden_size)
    threshold = source.threshold
    low = bool(classify_positions(per_layer[None, None, :], threshold.value)[0, 0])
    gens = source.table("generations")
    rows = gens[(gens["question_id"] == qid) & (gens["turn"] == turn)].set_index("depth")["token_ids"]
    div = first_divergence(rows[lo], rows[hi]) if lo in rows.index and hi in rows.index else NEVER
    return {"available": True, "compared": f"depth {lo} iteration 1 vs depth {hi} iteration {hi}",
            "per_layer": plain(per_layer), "low_overlap": low, "threshold": threshold.value,
            "threshold_source": threshold.source, "threshold_ready": threshold.ready, "k": k,
            "min_layer": int(np.nanargmin(per_layer)) if np.isfinite(per_layer).any() else None,
            "pre_divergence": div == NEVER or position <= div, "first_divergence": div}


def position_view(source: RunSource, qid: str, depth: int, turn: int, position: int) -> dict[str, Any]:
    """Everything the position view shows (see the module docstring).

    Returns ``iterations`` [I], ``layers`` [L], ``states`` ("hidden" or "sketch"), ``k``, ``overlap`` [I-1][L]
    (row i: iteration i+1 vs i+2), ``l2_delta`` [I-1][L] and ``norm`` [I][L] (full states only; at a sketch
    position ``l2_message`` says why they are missing), ``regime`` (the smallest depth against ``depth``) and
    ``lens`` (:func:`sst_interp.explore.question.token_detail`).
    """
    check_question(source, qid, depth)
    run = source.run
    kind, iterations, states, k = _cached_states(source, qid, depth, turn, position)
    overlap = _consecutive_overlap(kind, states, k, run.hidden_size)
    out: dict[str, Any] = {
        "question_id": qid, "depth": depth, "turn": turn, "position": position, "states": kind, "k": k,
        "iterations": iterations.tolist(), "layers": list(range(states.shape[1])), "overlap": plain(overlap),
        "l2_delta": None, "norm": None,
    }
    if kind == "hidden":
        by_layer = np.swapaxes(states, 0, 1)  # [L, I, d]
        out["l2_delta"] = plain(l2_deltas(by_layer).T)  # [I-1, L]
        out["norm"] = plain(np.sqrt(np.einsum("lid,lid->li", by_layer.astype(np.float64),
                                              by_layer.astype(np.float64))).T)
    else:
        full = int(run.manifest.get("full_positions") or 0)
        out["l2_message"] = (f"the state L2 change needs full hidden states: position {position} is past the "
                             f"full-state window (positions 0-{full - 1}), where the run kept top-k sketches only")
    out["regime"] = _regime(source, qid, turn, position, depth)
    try:
        out["lens"] = token_detail(source, qid, depth, turn, position)
    except UsageError as err:
        out["lens"] = {"error": str(err)}
    return out
