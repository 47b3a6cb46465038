"""Drawing the planted truth of one synthetic question (pure numpy, no I/O); used by :mod:`sst_interp.synthetic.writer`.

Every draw comes from ``numpy.random.default_rng([seed, question_index, stream])``, so a question's plan is the
same whatever the batch size, and a resumed run regenerates identical data.
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from sst_interp.kernels.errors import UsageError
from sst_interp.synthetic.spec import KINDS, SyntheticSpec

# Basin-shift kinds: which consecutive-iteration transitions (i -> i+1) carry the shift.
BASIN_SUSTAINED, BASIN_FIRST, BASIN_LATE = 0, 1, 2
GAP_QUANTUM = 1.0 / 16.0  # planted logits and logprobs are multiples of 1/16 nat (exact in float32)
MAX_GAP = 6.375

_STREAM_CORRECT, _STREAM_BASIN, _STREAM_SWAPS, _STREAM_DIVERGE, _STREAM_LOGITS = 1, 2, 3, 4, 5


def rng_for(seed: int, index: int, stream: int) -> np.random.Generator:
    """The generator of one (question, stream); streams are independent of each other and of batching."""
    return np.random.default_rng([int(seed), int(index), int(stream)])


def quantise(x: np.ndarray | float) -> np.ndarray:
    """Round to the nearest multiple of 1/16 (float64)."""
    return np.round(np.asarray(x, dtype=np.float64) / GAP_QUANTUM) * GAP_QUANTUM


# ---------------------------------------------------------------------------------------------- layer profiles
_PROFILE_KNOTS: dict[str, tuple[tuple[float, float], ...]] = {
    # shift weight per depth fraction; 0 below the first knot (those layers do not shift)
    "paper": ((5 / 61, 0.35), (25 / 61, 0.7), (30 / 61, 0.55), (50 / 61, 0.6), (1.0, 1.0)),
    "late": ((25 / 61, 0.35), (50 / 61, 1.0), (1.0, 0.6)),
    "uniform": ((0.0, 1.0), (1.0, 1.0)),
}


def layer_profile_weights(name: str, num_layers: int) -> np.ndarray:
    """Per-layer shift weight in {0} U [0.35, 1] for a named profile: ``weights: [num_layers]`` float64.

    Names: ``paper`` (no shift below 5/61 of depth, local trough at 25/61, partial recovery to 30/61, deepest at
    the last layer), ``late`` (onset at 25/61, deepest at 50/61), ``uniform`` (every layer), ``band:LO:HI``
    (weight 1 for layers whose depth fraction is in [LO, HI], else 0).
    """
    frac = np.arange(num_layers) / max(num_layers - 1, 1)
    if name.startswith("band:"):
        try:
            lo, hi = (float(x) for x in name.split(":")[1:3])
        except ValueError as err:
            raise UsageError(f"layer profile {name!r} must look like band:0.3:0.6") from err
        weights = ((frac >= lo - 1e-9) & (frac <= hi + 1e-9)).astype(np.float64)
        if not weights.any():
            raise UsageError(f"layer profile {name!r} selects no layer of a {num_layers}-layer model")
        return weights
    if name not in _PROFILE_KNOTS:
        raise UsageError(f"unknown layer profile {name!r}; use paper, late, uniform or band:LO:HI")
    knots = _PROFILE_KNOTS[name]
    xs = np.array([k[0] for k in knots])
    ys = np.array([k[1] for k in knots])
    weights = np.interp(frac, xs, ys)
    weights[frac < xs[0] - 1e-9] = 0.0
    if not weights.any():  # very shallow models: keep at least the last layer shifting
        weights[-1] = ys[-1]
    return weights


# ---------------------------------------------------------------------------------------------- the plan
@dataclass
class PlantedArrays:
    """The arrays planted for a question, declared once: a :class:`QuestionPlan` holds one question's, and
    :class:`~sst_interp.synthetic.truth.PlantedTruth` the same arrays stacked over the run's questions (a leading
    ``[Q]`` axis). Shapes use P = full + sketch positions, P_full = full positions, I = max depth.

    Args:
        correct: [n_depths] bool, correctness at each recorded flat depth.
        basin: [P] bool, positions with a planted basin shift.
        basin_kind: [P] int8, -1 (none) or BASIN_SUSTAINED / BASIN_FIRST / BASIN_LATE (0 / 1 / 2).
        onset: [P] int8, first transition t (iteration t -> t+1) carrying the shift; 0 when none.
        swaps: [P, L, I] int16, cumulative number of swapped top-k dimensions at iteration i (index i-1) relative
            to iteration 1; top-k overlap(iter a, iter b) = 1 - |swaps_b - swaps_a| / k exactly.
        divergence: [n_depths] int64, token position where the run at that depth first differs from the run at
            the smallest depth; -1 when its trace is identical (and -1 for the smallest depth itself).
        winners: [P_full, I] int16, rank (0-based, in the iteration-1 ranking) of the argmax at each iteration.
        flip_basin: [P_full, I] bool, the flip at (position, iteration) happened in the basin-shift phase.
        gaps: [P_full] float64, iteration-1 top-1 minus top-2 logprob gap (multiple of 1/16).
        replaced: [P_full, I] int16, iteration-1 top-n tokens (n = min(100, K)) pushed out of the top-n.
        halt: [I] bool, MUST HALT label of iteration (= depth) d, column d-1 (``app:halting_training``).
    """

    correct: np.ndarray
    basin: np.ndarray
    basin_kind: np.ndarray
    onset: np.ndarray
    swaps: np.ndarray
    divergence: np.ndarray
    winners: np.ndarray
    flip_basin: np.ndarray
    gaps: np.ndarray
    replaced: np.ndarray
    halt: np.ndarray


@dataclass
class QuestionPlan(PlantedArrays):
    """Everything planted for one question: the :class:`PlantedArrays` of one question, and

    Args:
        index: question index in the run.
        question_id: its id.
        kind: correctness kind (one of ``KINDS``).
        noise_scale: [I] float64, scale of the iteration's noise in the hidden states (L2 delta plant).
    """

    index: int
    question_id: str
    kind: str
    noise_scale: np.ndarray


def plan_question(spec: SyntheticSpec, index: int) -> QuestionPlan:
    """Draw the plan of question ``index`` from ``spec`` (deterministic in ``(spec.seed, index)``)."""
    depths = list(spec.depths)
    i_max = max(depths)
    kind, correct = _plan_correctness(spec, index)
    basin, basin_kind, onset, exception = _plan_basins(spec, index, i_max)
    swaps = _plan_swaps(spec, index, basin, basin_kind, onset, i_max)
    divergence = _plan_divergence(spec, index, basin, exception)
    winners, flip_basin, gaps, replaced = _plan_logits(spec, index, basin, onset, divergence)
    halt = halting_labels(depths, correct, i_max)
    noise = np.zeros(i_max)
    for i in range(2, i_max + 1):
        noise[i - 1] = spec.l2_noise * spec.l2_decay ** (i - 2)
        if spec.l2_signal and _degrades(depths, correct, i):
            noise[i - 1] *= 1.0 + spec.l2_signal
    return QuestionPlan(index=index, question_id=spec.question_id(index), kind=kind, correct=correct, basin=basin,
                        basin_kind=basin_kind, onset=onset, swaps=swaps, divergence=divergence, winners=winners,
                        flip_basin=flip_basin, gaps=gaps, replaced=replaced, halt=halt, noise_scale=noise)


def staged(depths: list[int], correct: np.ndarray, d: int) -> bool:
    """Passes at staged depth <= d: correct at some recorded flat depth <= d."""
    return bool(any(c for depth, c in zip(depths, correct) if depth <= d))


def halting_labels(depths: list[int], correct: np.ndarray, i_max: int) -> np.ndarray:
    """[i_max] bool: MUST HALT at depth d iff it passes at staged depth <= d and fails at flat depth d+1.

    Depths without a recorded flat d+1 (the last one, or gaps in ``depths``) are SAFE.
    """
    out = np.zeros(i_max, dtype=bool)
    at = dict(zip(depths, correct))
    for d in range(1, i_max + 1):
        if d + 1 in at:
            out[d - 1] = staged(depths, correct, d) and not bool(at[d + 1])
    return out


def _degrades(depths: list[int], correct: np.ndarray, i: int) -> bool:
    at = dict(zip(depths, correct))
    return i in at and i + 1 in at and bool(at[i]) and not bool(at[i + 1])


def _plan_correctness(spec: SyntheticSpec, index: int) -> tuple[str, np.ndarray]:
    depths = list(spec.depths)
    n = len(depths)
    if spec.correct is not None:
        row = np.asarray(spec.correct, dtype=bool)[index]
        return "given", row.copy()
    rng = rng_for(spec.seed, index, _STREAM_CORRECT)
    probs = np.array([spec.correctness_kinds.get(k, 0.0) for k in KINDS], dtype=np.float64)
    kind = KINDS[int(rng.choice(len(KINDS), p=probs / probs.sum()))]
    correct = np.zeros(n, dtype=bool)
    if n == 1 and kind in ("recover", "regress", "fragile"):
        kind = "random"
    if kind == "always":
        correct[:] = True
    elif kind == "recover":  # wrong below depth r, right from r on
        r = int(rng.integers(1, n))
        correct[r:] = True
    elif kind == "regress":  # right at the smallest depth, wrong from r on (overthinking regression)
        r = int(rng.integers(1, n))
        correct[:r] = True
    elif kind == "fragile":  # wrong, right at exactly one deeper depth, wrong again after it
        r = int(rng.integers(1, n))
        correct[r] = True
    elif kind == "random":
        correct[:] = rng.random(n) < 0.5
    return kind, correct


def _plan_basins(spec: SyntheticSpec, index: int, i_max: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    p_full, p_total = spec.full_positions, spec.full_positions + spec.sketch_positions
    rng = rng_for(spec.seed, index, _STREAM_BASIN)
    rates = np.full(p_total, spec.sketch_rate)
    rates[:p_full] = spec.rates()[:p_full]
    basin = rng.random(p_total) < rates
    if spec.pos0_universal:
        basin[0] = True
    exception = index < spec.n_exceptions and p_full >= 2 and i_max >= 2
    if exception:  # divergence will be planted at position 0, before the first basin shift
        basin[0] = False
        basin[min(2, p_full - 1)] = True
    kind = np.full(p_total, -1, dtype=np.int8)
    onset = np.zeros(p_total, dtype=np.int8)
    if i_max < 2:
        basin[:] = False
        return basin, kind, onset, False
    probs = np.array([spec.basin_kinds.get(k, 0.0) for k in ("sustained", "first", "late")])
    draws = rng.choice(3, size=p_total, p=probs / probs.sum())
    late_onsets = rng.integers(2, max(i_max, 3), size=p_total)
    for p in np.flatnonzero(basin):
        k = int(draws[p]) if (p > 0 or exception) else BASIN_SUSTAINED
        if k == BASIN_LATE and i_max < 3:
            k = BASIN_FIRST
        kind[p] = k
        onset[p] = int(late_onsets[p]) if k == BASIN_LATE else 1
    return basin, kind, onset, exception


def _plan_swaps(spec: SyntheticSpec, index: int, basin: np.ndarray, kind: np.ndarray, onset: np.ndarray,
                i_max: int) -> np.ndarray:
    k, layers = spec.overlap_k, spec.num_layers
    p_total = basin.shape[0]
    rng = rng_for(spec.seed, index, _STREAM_SWAPS)
    stable_max = int(np.floor(spec.stable_step * k))
    steps = rng.integers(0, stable_max + 1, size=(p_total, layers, max(i_max - 1, 0)))
    amps = rng.uniform(spec.basin_amplitude[0], spec.basin_amplitude[1], size=p_total)
    w0 = layer_profile_weights(spec.pos0_layer_profile, layers)
    w = layer_profile_weights(spec.layer_profile, layers)
    for p in np.flatnonzero(basin):
        weights = w0 if p == 0 else w
        if kind[p] == BASIN_SUSTAINED:
            active = list(range(1, i_max))
        else:
            active = [int(onset[p])]
        total = np.round(k * amps[p] * weights).astype(np.int64)  # [L]
        per = np.floor(total / len(active)).astype(np.int64)
        shifting = weights > 0
        for j, t in enumerate(active):
            inc = per + (total - per * len(active) if j == 0 else 0)
            steps[p, shifting, t - 1] = inc[shifting]
    swaps = np.zeros((p_total, layers, i_max), dtype=np.int64)
    if i_max > 1:
        swaps[:, :, 1:] = np.cumsum(steps, axis=2)
    limit = min(k, spec.hidden_size - k)
    if swaps.max(initial=0) > limit:
        raise UsageError(f"planted swaps exceed min(k, d-k) = {limit}; lower basin_amplitude or stable_step")
    return swaps.astype(np.int16)


def _plan_divergence(spec: SyntheticSpec, index: int, basin: np.ndarray, exception: bool) -> np.ndarray:
    depths = list(spec.depths)
    p_full = spec.full_positions
    n_tokens = spec.n_tokens
    div = np.full(len(depths), -1, dtype=np.int64)
    if len(depths) < 2:
        return div
    rng = rng_for(spec.seed, index, _STREAM_DIVERGE)
    if spec.divergence is not None:
        row = np.asarray(spec.divergence, dtype=np.int64)[index]
        div[1:] = row[1:] if row.shape[0] == len(depths) else row
        return div
    probs = np.asarray(spec.divergence_probs, dtype=np.float64)
    category = int(rng.choice(3, p=probs / probs.sum()))
    first_basin = int(np.flatnonzero(basin)[0]) if basin.any() else p_full
    if exception:
        first = 0
    elif category == 0 and first_basin == 0:
        first = 0
    elif category <= 1 and max(first_basin, 1) < p_full:
        first = int(rng.integers(max(first_basin, 1), p_full))
    elif n_tokens > p_full:
        first = int(rng.integers(p_full, n_tokens))
    else:
        return div
    leader = 1 + int(rng.integers(0, len(depths) - 1))
    for j in range(1, len(depths)):
        if j == leader:
            div[j] = first
        elif rng.random() < spec.identical_trace_prob:
            div[j] = -1
        else:
            later = first + int(rng.integers(0, 3))
            div[j] = later if later < n_tokens else -1
    return div


def _plan_logits(spec: SyntheticSpec, index: int, basin: np.ndarray, onset: np.ndarray, divergence: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    depths = list(spec.depths)
    i_max = max(depths)
    p_full = spec.full_positions
    n_top = spec.reorg_top_n
    rng = rng_for(spec.seed, index, _STREAM_LOGITS)
    winners = np.zeros((p_full, i_max), dtype=np.int16)
    flip_basin = np.zeros((p_full, i_max), dtype=bool)
    replaced = np.zeros((p_full, i_max), dtype=np.int16)
    base = depths[0]
    div_at = {d: int(v) for d, v in zip(depths, divergence)}
    max_rank = max(1, min(49, n_top - 2))
    for p in range(p_full):
        # the reference (smallest-depth) run's winner at this position may itself be a within-run flip
        for i in range(2, i_max + 1):
            phase_basin = bool(basin[p]) and i >= int(onset[p]) + 1
            constrained = i in div_at and i != base and (div_at[i] < 0 or p <= div_at[i])
            if constrained:
                continue
            prob = spec.flip_prob_basin if phase_basin else spec.flip_prob_stable
            if rng.random() < prob:
                winners[p, i - 1] = int(rng.integers(1, max_rank + 1)) if phase_basin else 1
                flip_basin[p, i - 1] = phase_basin
        ref = int(winners[p, base - 1])
        used = {ref}
        for i in depths[1:]:
            if div_at[i] < 0 or p < div_at[i]:
                winners[p, i - 1] = ref
            elif p == div_at[i]:  # the run at depth i emits a different token here than the reference run
                phase_basin = bool(basin[p]) and i >= int(onset[p]) + 1
                if phase_basin:
                    choices = [r for r in range(1, max_rank + 1) if r not in used] or [1 if ref != 1 else 0]
                    r = int(rng.choice(choices[:8]))
                    used.add(r)
                else:  # stable-phase flips always promote the iteration-1 runner-up
                    r = 1 if ref != 1 else 0
                winners[p, i - 1] = r
                flip_basin[p, i - 1] = phase_basin
        for i in range(2, i_max + 1):
            active = bool(basin[p]) and i >= int(onset[p]) + 1
            if active:
                replaced[p, i - 1] = int(rng.integers(int(0.3 * n_top), int(0.75 * n_top) + 1))
            else:
                replaced[p, i - 1] = int(rng.choice(3, p=[0.3, 0.45, 0.25]))
        replaced[p] = np.minimum(replaced[p], max(n_top - 3, 0))
    gaps = np.zeros(p_full)
    for p in range(p_full):
        stable_flip = bool(((winners[p] != 0) & ~flip_basin[p]).any())
        if stable_flip:  # ties or the minimum gaps: the only way a stable position changes its argmax
            gaps[p] = float(rng.choice([0.0, GAP_QUANTUM, 2 * GAP_QUANTUM], p=[0.55, 0.25, 0.2]))
        elif basin[p]:
            gaps[p] = 0.0 if rng.random() < 0.05 else float(np.clip(quantise(rng.exponential(1.6)),
                                                                     GAP_QUANTUM, MAX_GAP))
        else:
            gaps[p] = float(np.clip(quantise(rng.exponential(1.0)), GAP_QUANTUM, MAX_GAP))
    if spec.gaps is not None:  # explicit gaps, rounded to the 1/16 grid that keeps them exact in float32
        gaps = np.clip(quantise(np.asarray(spec.gaps, dtype=np.float64)[index][:p_full]), 0.0, None)
    return winners, flip_basin, gaps, replaced
