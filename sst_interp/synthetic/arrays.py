"""Turning a :class:`~sst_interp.synthetic.plan.QuestionPlan` into the arrays a run stores (no I/O).

Hidden states: each (question, position, layer) cell has a per-question permutation ``perm`` of the d dimensions
and an offset ``o``; at iteration i (cumulative swaps ``m_i``) the top-k |value| set is exactly
``perm[o + m_i : o + m_i + k]``. Dimensions in that set get magnitude 2 + u, the others u (u ~ U[0, 1)), with a
fixed random sign per dimension, plus a drift (one noise step per iteration >= 2, the L2-delta plant) clipped to
+-0.45, so the top-k set is never ambiguous
(|values| in [1.55, 3.45] against [0, 1.45]). Hence top-k overlap(iter a, iter b) = 1 - |m_b - m_a| / k exactly.
The halting dimensions are the last entries of ``perm`` (never in any top-k set); at position 0 and the halting
layer they hold +strength (MUST HALT) or -strength (SAFE) plus small noise.

Logits: each full-window position has a pool of ``K + n`` candidate tokens (n = min(100, K)) ranked by their
iteration-1 logits (multiples of 1/16, strictly decreasing after rank 2, rank 1 below rank 0 by the planted gap).
Later iterations promote the planted winner, push the planted number of iteration-1 top-n tokens below the pool,
and are renormalised with a 1/16-quantised log-normaliser, so every log-prob and every gap is exact in float32.
"""

from __future__ import annotations

import numpy as np

from sst_interp.synthetic.plan import GAP_QUANTUM, QuestionPlan, rng_for
from sst_interp.synthetic.spec import SyntheticSpec

_STREAM_LAYOUT, _STREAM_VALUES, _STREAM_POOL, _STREAM_TOKENS = 11, 12, 13, 14
NOISE_CLIP = 0.45


def question_layout(spec: SyntheticSpec, plan: QuestionPlan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The question's dimension permutation and per-cell offsets.

    Returns ``perm: [d]`` (halting dims last), ``inverse: [d]`` (position of each dim in ``perm``) and
    ``offsets: [P, L]`` with P = full + sketch positions.
    """
    rng = rng_for(spec.seed, plan.index, _STREAM_LAYOUT)
    d, k = spec.hidden_size, spec.overlap_k
    feature = np.asarray(spec.halting_dim_list(), dtype=np.int64)
    rest = np.setdiff1d(np.arange(d), feature)
    perm = np.concatenate([rng.permutation(rest), feature]).astype(np.int64)
    inverse = np.empty(d, dtype=np.int64)
    inverse[perm] = np.arange(d)
    span = k + int(plan.swaps.max(initial=0))
    room = d - feature.size - span
    if room < 0:
        raise ValueError(f"hidden_size {d} too small for k={k}, swaps and {feature.size} halting dims")
    p_total = spec.full_positions + spec.sketch_positions
    offsets = rng.integers(0, room + 1, size=(p_total, spec.num_layers))
    return perm, inverse, offsets


def hidden_cube(spec: SyntheticSpec, plan: QuestionPlan, layout: tuple[np.ndarray, np.ndarray, np.ndarray]
                ) -> np.ndarray:
    """Full hidden states of the question's full window: ``[P_full, I_max, L, d]`` float32 (run-independent)."""
    _, inverse, offsets = layout
    p_full, layers, d, k = spec.full_positions, spec.num_layers, spec.hidden_size, spec.overlap_k
    i_max = plan.swaps.shape[2]
    rng = rng_for(spec.seed, plan.index, _STREAM_VALUES)
    cells = p_full * layers
    sign = np.where(rng.random((cells, d)) < 0.5, -1.0, 1.0).astype(np.float32)
    small = sign * rng.random((cells, d), dtype=np.float32)
    big = sign * (2.0 + rng.random((cells, d), dtype=np.float32))
    rel = inverse[None, :] - offsets[:p_full].reshape(cells, 1)  # [cells, d]
    out = np.empty((p_full, i_max, layers, d), dtype=np.float32)
    feature = spec.halting_dim_list()
    drift = np.zeros((cells, d), dtype=np.float32)
    for i in range(i_max):
        m = plan.swaps[:p_full, :, i].reshape(cells, 1).astype(np.int64)
        inside = (rel >= m) & (rel < m + k)
        values = np.where(inside, big, small)
        if plan.noise_scale[i] > 0:  # each iteration moves the state by one noise step (the L2 delta plant)
            drift += rng.standard_normal((cells, d), dtype=np.float32) * np.float32(plan.noise_scale[i])
            values += np.clip(drift, -NOISE_CLIP, NOISE_CLIP)
        values = values.reshape(p_full, layers, d)
        if feature:
            sign_i = 1.0 if plan.halt[i] else -1.0
            jitter = np.clip(0.1 * rng.standard_normal(len(feature)), -0.2, 0.2)
            values[0, spec.halting_layer_index, feature] = sign_i * spec.halting_strength + jitter
        out[:, i] = values
    return out


def sketch_rows(spec: SyntheticSpec, plan: QuestionPlan, layout: tuple[np.ndarray, np.ndarray, np.ndarray],
                depth: int) -> np.ndarray:
    """Top-k index sets of the sketch positions for iterations 1..depth: ``[P_sketch, depth, L, k]`` int32 sorted."""
    perm, _, offsets = layout
    p_full, k = spec.full_positions, spec.overlap_k
    off = offsets[p_full:]  # [Ps, L]
    m = plan.swaps[p_full:, :, :depth].astype(np.int64)  # [Ps, L, depth]
    start = off[:, :, None] + m  # [Ps, L, depth]
    idx = perm[start[..., None] + np.arange(k)]  # [Ps, L, depth, k]
    idx.sort(axis=-1)
    return np.ascontiguousarray(idx.transpose(0, 2, 1, 3)).astype(np.int32)


def logit_arrays(spec: SyntheticSpec, plan: QuestionPlan) -> dict[str, np.ndarray]:
    """Per-iteration logits of the full window, run-independent.

    Returns ``argmax [P, I]``, ``top_ids [P, I, K]``, ``top_logprobs [P, I, K]``, ``entropy [P, I]``,
    ``tracked_logprobs [P, I, K]`` and ``pool_ids [P, K + n]`` (the candidate tokens in iteration-1 rank order).
    """
    rng = rng_for(spec.seed, plan.index, _STREAM_POOL)
    p_full, big_k, n_top = spec.full_positions, spec.top_k, spec.reorg_top_n
    i_max = plan.winners.shape[1]
    pool = big_k + n_top
    out = {
        "argmax": np.zeros((p_full, i_max), dtype=np.int32),
        "top_ids": np.zeros((p_full, i_max, big_k), dtype=np.int32),
        "top_logprobs": np.zeros((p_full, i_max, big_k), dtype=np.float32),
        "entropy": np.zeros((p_full, i_max), dtype=np.float32),
        "tracked_logprobs": np.zeros((p_full, i_max, big_k), dtype=np.float32),
        "pool_ids": np.zeros((p_full, pool), dtype=np.int32),
    }
    rest_count = spec.vocab_size - pool
    for p in range(p_full):
        ids = rng.choice(spec.vocab_size, size=pool, replace=False).astype(np.int32)
        steps = rng.integers(1, 5, size=pool) * GAP_QUANTUM
        z1 = np.empty(pool)
        z1[0] = 16.0
        z1[1] = z1[0] - plan.gaps[p]
        z1[2:] = z1[1] - np.cumsum(steps[2:])
        out["pool_ids"][p] = ids
        for i in range(i_max):
            z = z1.copy()
            r = int(plan.winners[p, i])
            n_rep = int(plan.replaced[p, i]) if i > 0 else 0
            if n_rep:
                lo = 2 if plan.flip_basin[p, i] or (plan.basin[p] and i >= int(plan.onset[p])) else max(2, n_top // 2)
                candidates = np.setdiff1d(np.arange(lo, n_top), [r])
                pushed = rng.choice(candidates, size=min(n_rep, candidates.size), replace=False)
                z[pushed] = z1[-1] - GAP_QUANTUM * (1 + np.arange(pushed.size))
            if r != 0:
                headroom = z1[0] - z1[min(n_top, pool - 1)] - GAP_QUANTUM
                if plan.flip_basin[p, i]:
                    suppress = min(float(np.round(rng.uniform(0.5, 2.5) * 16) / 16), headroom)
                    z[0] = z1[0] - max(suppress, GAP_QUANTUM)
                    z[r] = z1[0] + float(np.round(rng.uniform(1, 16))) * GAP_QUANTUM
                else:  # stable flip: runner-up overtakes by the minimum step
                    z[0] = z1[0] - GAP_QUANTUM
                    z[r] = z1[0]
            rest_z = z.min() - 2.0
            lse = np.logaddexp(np.logaddexp.reduce(z), rest_z + np.log(max(rest_count, 1)))
            norm = np.ceil(lse / GAP_QUANTUM) * GAP_QUANTUM
            logp = z - norm
            prob = np.exp(z - lse)
            rest_p = np.exp(rest_z - lse)
            entropy = -(prob * (z - lse)).sum() - rest_count * rest_p * (rest_z - lse)
            order = np.argsort(-z, kind="stable")[:big_k]
            out["argmax"][p, i] = ids[order[0]]
            out["top_ids"][p, i] = ids[order]
            out["top_logprobs"][p, i] = logp[order]
            out["entropy"][p, i] = entropy
            out["tracked_logprobs"][p, i] = logp[:big_k]
    return out


def token_trace(spec: SyntheticSpec, plan: QuestionPlan, depth: int, pool_ids: np.ndarray) -> np.ndarray:
    """The generated tokens of the run at ``depth``: ``[n_tokens]`` int32.

    Window positions emit the pool token of the iteration-``depth`` winner; later positions follow a shared base
    trace until the run's planted divergence position, then a run-specific one.
    """
    rng = rng_for(spec.seed, plan.index, _STREAM_TOKENS)
    base = rng.integers(0, spec.vocab_size, size=spec.n_tokens).astype(np.int64)
    tokens = base.copy()
    p_full = spec.full_positions
    tokens[:p_full] = pool_ids[np.arange(p_full), plan.winners[:, depth - 1]]
    div = int(plan.divergence[list(spec.depths).index(depth)])
    if div >= 0:
        after = np.arange(spec.n_tokens) >= max(div, p_full)
        tokens[after] = (base[after] + depth) % spec.vocab_size
    return tokens.astype(np.int32)
