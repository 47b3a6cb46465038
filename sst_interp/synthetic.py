"""Planted-truth synthetic runs: a run directory with known structure, written through :class:`RunWriter`.

``write_synthetic_run(path, spec) -> PlantedTruth`` writes questions, generations, hidden states (full window),
top-k sketches (positions beyond it) and per-iteration logits for every depth in ``spec.depths``, one batch of
questions at a time (memory: one batch's arrays, never the run). Everything is drawn from
``numpy.random.default_rng([seed, question_index, stream])``, so the same spec gives identical bytes, and an
interrupted call resumes (questions already complete at a depth are skipped).

What is planted (all recorded exactly in :class:`PlantedTruth`):

- **Basin shifts** (overlap, basins): at planted positions (position 0 always when ``pos0_universal``, others with
  per-position rates) a fraction ``amp * w[l]`` of the top-k dimensions (``k = overlap_k``) is swapped out between
  iteration 1 and the last iteration, where ``w`` is the layer profile (``paper``, ``late``, ``uniform``,
  ``band:LO:HI``; layers with ``w = 0`` do not shift). Elsewhere at most ``floor(stable_step * k)`` dimensions move
  per iteration. Shifts are ``sustained`` (every transition i -> i+1), ``first`` (1 -> 2 only) or ``late`` (one
  later transition). Top-k overlap between iterations a and b is ``1 - |swaps_b - swaps_a| / k`` exactly.
  Iteration states do not depend on the run's depth (the state after iteration i is the same in every run of depth
  >= i; exact at position 0, a simplification elsewhere).
- **First divergence** (divergence): the run at depth D first emits a different token from the run at the smallest
  depth at token position ``divergence[q, D]`` (-1: identical trace). Categories at position 0 / inside the full
  window / beyond it follow ``divergence_probs``; ``n_exceptions`` questions diverge at position 0 before their
  first basin shift (the exceptions of tab:causal_ordering).
- **Argmax flips with gaps** (logit dynamics): ``winners[q, p, i]`` is the iteration-1 rank of iteration i's argmax;
  ``gaps[q, p]`` the iteration-1 top-1 minus top-2 log-prob gap (multiples of 1/16 nat, exact ties included).
  Flips in the stable phase always promote the runner-up and occur only at gaps 0, 1/16 or 1/8; flips in the basin
  phase promote ranks up to 49 over any gap. ``replaced[q, p, i]`` iteration-1 top-n tokens (n = min(100, K)) leave
  the top-n at iteration i (many in the basin phase, 0-2 otherwise); ``flip_basin`` marks basin-phase flips.
- **Correctness** per question and depth (generations.parquet ``correct``), from kinds ``always``, ``never``,
  ``recover`` (wrong, then right from a deeper depth on), ``regress`` (right, then wrong: overthinking),
  ``fragile`` (right at exactly one deeper depth), ``random``; or an explicit ``correct`` matrix.
- **Halting feature**: at position 0 and ``halting_layer``, dimensions ``halting_dims`` hold ``+halting_strength``
  after iteration d when depth d is MUST HALT (passes at staged depth <= d and fails at flat depth d+1, DESIGN
  section 7) and ``-halting_strength`` otherwise (SAFE; also every non-recoverable question). No feature when
  ``halting_dims == ()``.
- **L2 deltas that do not predict correctness** (convergence): iteration i >= 2 moves every state by a noise step
  of scale ``l2_noise * l2_decay**(i-2)`` (so deltas shrink with iterations, the same for every difficulty group),
  independent of correctness; ``l2_signal > 0`` multiplies the step into iteration i by ``1 + l2_signal`` when the
  question degrades from flat depth i to i+1 (a positive control). Basin swaps add to the deltas too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.errors import UsageError
from sst_interp.synthetic_arrays import hidden_cube, logit_arrays, question_layout, sketch_rows, token_trace
from sst_interp.synthetic_plan import KINDS, QuestionPlan, plan_question

PAPER_POSITION_RATES = (1.0, 0.42, 0.2, 0.04, 0.06, 0.15, 0.12, 0.18, 0.2, 0.22)
LETTERS = ("A", "B", "C", "D")


@dataclass
class SyntheticSpec:
    """Size and plants of a synthetic run (the paper scale is 198 questions, depths 1-4, 10 full positions,
    62 layers, d = 5376).

    Args:
        n_questions: number of questions.
        depths: flat depths recorded; the run at depth D records iterations 1..D.
        full_positions: generated positions with full hidden states and logits (position 0 always included).
        sketch_positions: further positions recorded as top-k sketches.
        extra_tokens: generated tokens after the recorded positions (in token_ids only).
        num_layers: decoder layers.
        hidden_size: d.
        vocab_size: token ids are drawn from [0, vocab_size).
        top_k: K, logit top-K per row (default 128, as DESIGN).
        sketch_k: k of the sketches and of the basin plant; None -> round(d * 1024 / 5376).
        dtype: "float32" or "bfloat16" (logical dtype of the hidden values).
        seed: seed of every draw.
        batch_questions: questions per writer batch (memory is one batch's arrays).
        pos0_universal: position 0 is a basin shift in every question (except exception questions).
        position_rates: basin-shift probability per full-window position; None -> PAPER_POSITION_RATES, cycled.
        sketch_rate: basin-shift probability at sketch positions.
        basin_amplitude: (lo, hi) of the swapped fraction of k at layer weight 1, drawn per position.
        layer_profile: layer profile of positions >= 1.
        pos0_layer_profile: layer profile of position 0.
        stable_step: at most floor(stable_step * k) dimensions move per iteration at stable cells.
        basin_kinds: probabilities of "sustained", "first", "late" shifts (position 0 is always sustained).
        divergence_probs: probabilities of first divergence at position 0, inside the full window, beyond it.
        divergence: optional explicit [n_questions, n_depths] first-divergence token positions (-1: identical;
            column 0, the smallest depth, is ignored).
        identical_trace_prob: per deeper depth, probability its trace equals the smallest depth's.
        n_exceptions: the first n questions diverge at position 0 before their first basin shift.
        flip_prob_basin: per (position, iteration) argmax flip probability in the basin phase.
        flip_prob_stable: the same in the stable phase.
        gaps: optional explicit [n_questions, full_positions] iteration-1 top-1 minus top-2 gaps (nats, rounded to
            multiples of 1/16); None draws them (0, 1/16 or 1/8 where a stable-phase flip happens, wide in basins).
        correctness_kinds: probabilities of the correctness kinds (see module docstring).
        correct: optional explicit [n_questions, n_depths] bool correctness.
        halting_layer: layer of the halting feature; None -> the paper's layer 15 scaled to num_layers.
        halting_dims: dimensions of the halting feature; None -> n_halting_dims drawn from the seed; () -> none.
        n_halting_dims: number of halting dims drawn when halting_dims is None.
        halting_strength: feature value (+ MUST HALT, - SAFE).
        l2_noise: noise scale at iteration 2.
        l2_decay: noise scale factor per further iteration.
        l2_signal: > 0 makes the noise (and L2 deltas) larger before a degrading step (positive control).
    """

    n_questions: int = 12
    depths: tuple[int, ...] = (1, 2, 3, 4)
    full_positions: int = 10
    sketch_positions: int = 0
    extra_tokens: int = 6
    num_layers: int = 8
    hidden_size: int = 512
    vocab_size: int = 4096
    top_k: int = 32
    sketch_k: int | None = None
    dtype: str = "float32"
    seed: int = 0
    batch_questions: int = 4
    pos0_universal: bool = True
    position_rates: tuple[float, ...] | None = None
    sketch_rate: float = 0.1
    basin_amplitude: tuple[float, float] = (0.3, 0.7)
    layer_profile: str = "paper"
    pos0_layer_profile: str = "paper"
    stable_step: float = 0.003
    basin_kinds: dict[str, float] = field(default_factory=lambda: {"sustained": 0.45, "first": 0.45, "late": 0.1})
    divergence_probs: tuple[float, float, float] = (0.379, 0.333, 0.288)
    divergence: Any = None
    identical_trace_prob: float = 0.05
    n_exceptions: int = 0
    flip_prob_basin: float = 0.3
    flip_prob_stable: float = 0.03
    gaps: Any = None
    correctness_kinds: dict[str, float] = field(default_factory=lambda: {
        "always": 0.3, "never": 0.25, "recover": 0.2, "regress": 0.15, "fragile": 0.05, "random": 0.05})
    correct: Any = None
    halting_layer: int | None = None
    halting_dims: tuple[int, ...] | None = None
    n_halting_dims: int = 8
    halting_strength: float = 0.7
    l2_noise: float = 0.1
    l2_decay: float = 0.5
    l2_signal: float = 0.0

    def __post_init__(self) -> None:
        self.depths = tuple(sorted({int(d) for d in self.depths}))
        if not self.depths or self.depths[0] < 1:
            raise UsageError(f"depths must be positive integers, got {self.depths}")
        if self.n_questions < 1 or self.full_positions < 1 or self.num_layers < 1:
            raise UsageError("n_questions, full_positions and num_layers must be >= 1")
        if self.dtype not in ("float32", "bfloat16"):
            raise UsageError(f"dtype must be float32 or bfloat16, got {self.dtype!r}")
        if self.vocab_size < 2 * (self.top_k + self.reorg_top_n) + max(self.depths) + 1:
            raise UsageError(f"vocab_size {self.vocab_size} too small for top_k {self.top_k}")
        unknown = set(self.correctness_kinds) - set(KINDS)
        if unknown:
            raise UsageError(f"unknown correctness kinds {sorted(unknown)}; use {', '.join(KINDS)}")
        for name in ("correct", "divergence", "gaps"):
            value = getattr(self, name)
            if value is not None and np.asarray(value).shape[0] != self.n_questions:
                raise UsageError(f"{name} must have one row per question ({self.n_questions})")
        if self.halting_dims is not None:
            self.halting_dims = tuple(int(x) for x in self.halting_dims)
            if any(not 0 <= x < self.hidden_size for x in self.halting_dims):
                raise UsageError(f"halting_dims must lie in [0, {self.hidden_size})")

    # derived sizes --------------------------------------------------------------------------------------
    @property
    def overlap_k(self) -> int:
        """k of the basin plant and the sketches: ``sketch_k`` or round(d * 1024 / 5376)."""
        if self.sketch_k is not None:
            return int(self.sketch_k)
        return max(1, int(round(self.hidden_size * 1024 / 5376)))

    @property
    def reorg_top_n(self) -> int:
        """n of the planted top-n replacement: min(100, top_k)."""
        return min(100, self.top_k)

    @property
    def n_tokens(self) -> int:
        """Generated tokens per run."""
        return self.full_positions + self.sketch_positions + self.extra_tokens

    @property
    def halting_layer_index(self) -> int:
        """The layer carrying the halting feature."""
        if self.halting_layer is not None:
            return int(self.halting_layer)
        return int(round(15 / 61 * (self.num_layers - 1)))

    def halting_dim_list(self) -> list[int]:
        """The halting dimensions (sorted)."""
        if self.halting_dims is not None:
            return sorted(self.halting_dims)
        rng = np.random.default_rng([self.seed, 987654])
        return sorted(int(x) for x in rng.choice(self.hidden_size, size=self.n_halting_dims, replace=False))

    def rates(self) -> np.ndarray:
        """Basin-shift probability of each full-window position: ``[full_positions]``."""
        base = PAPER_POSITION_RATES if self.position_rates is None else tuple(self.position_rates)
        return np.array([base[p % len(base)] for p in range(self.full_positions)], dtype=np.float64)

    def question_id(self, index: int) -> str:
        """Id of question ``index``."""
        return f"syn{index:04d}"

    def to_json(self) -> dict[str, Any]:
        """The spec as JSON-able values (arrays as lists)."""
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, np.ndarray):
                out[key] = value.tolist()
        return out


@dataclass
class PlantedTruth:
    """Exactly what a synthetic run holds (shapes: Q questions, P = full + sketch positions, I = max depth).

    Args:
        spec: the spec it was written from.
        question_ids: [Q] ids, in questions.parquet order.
        depths: the recorded depths.
        kinds: [Q] correctness kind of each question.
        correct: [Q, n_depths] bool.
        basin: [Q, P] bool, planted basin-shift positions.
        basin_kind: [Q, P] int8 (-1 none, 0 sustained, 1 first, 2 late).
        onset: [Q, P] int8, first shifting transition (i -> i+1).
        swaps: [Q, P, L, I] int16, cumulative swapped top-k dims at each iteration relative to iteration 1.
        divergence: [Q, n_depths] int64, first token position where each depth's trace differs from the
            smallest depth's (-1 identical / the smallest depth).
        winners: [Q, P_full, I] int16, iteration-1 rank of each iteration's argmax.
        flip_basin: [Q, P_full, I] bool, flip made in the basin phase.
        gaps: [Q, P_full] float64, iteration-1 top-1 minus top-2 log-prob gap.
        replaced: [Q, P_full, I] int16, iteration-1 top-n tokens out of the top-n at each iteration.
        halt: [Q, I] bool, MUST HALT label at depth d (column d-1).
        halting_layer: layer of the halting feature.
        halting_dims: its dimensions (empty: no feature).
        tokens: {(question_id, depth): [n_tokens] int32} generated token ids.
    """

    spec: SyntheticSpec
    question_ids: list[str]
    depths: list[int]
    kinds: list[str]
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
        return bool(any(c for d, c in zip(self.depths, self.correct[question]) if d <= depth))


def write_synthetic_run(path: str | Path, spec: SyntheticSpec, progress: bool = False) -> PlantedTruth:
    """Write a synthetic run directory at ``path`` (created, or resumed if it holds this spec's run).

    Returns the :class:`PlantedTruth`. Memory: one batch of ``spec.batch_questions`` questions' arrays
    (``[P_full, I_max, L, d]`` float32 hidden states each) plus the truth's ``swaps`` ([Q, P, L, I] int16).
    """
    from sst_interp.store import RunWriter  # imported here so the plan code has no I/O dependency

    depths = list(spec.depths)
    i_max = max(depths)
    identity = {"model": "synthetic", "checkpoint": None, "data": f"synthetic:seed={spec.seed}",
                "spec": json.dumps(spec.to_json(), sort_keys=True, default=str)}
    extra = {"hidden_size": spec.hidden_size, "num_layers": spec.num_layers, "dtype": spec.dtype,
             "depths": depths, "full_positions": spec.full_positions, "sketch_positions": spec.sketch_positions,
             "sketch_k": spec.overlap_k, "top_k": spec.top_k, "decoding": "greedy", "prompt_mode": "synthetic",
             "depth_policy": "fixed"}
    plans: list[QuestionPlan] = []
    tokens: dict[tuple[str, int], np.ndarray] = {}
    with RunWriter.create_or_resume(path, identity, extra) as writer:
        writer.write_questions(_questions_frame(spec))
        done = {d: writer.completed(d) for d in depths}
        indices = range(spec.n_questions)
        for start in range(0, spec.n_questions, spec.batch_questions):
            batch = [plan_question(spec, i) for i in indices[start:start + spec.batch_questions]]
            plans.extend(batch)
            arrays = [_question_arrays(spec, p, need_hidden=any(p.question_id not in done[d] for d in depths))
                      for p in batch]
            for plan, arr in zip(batch, arrays):
                for d in depths:
                    tokens[(plan.question_id, d)] = token_trace(spec, plan, d, arr["pool_ids"])
            for d in depths:
                pairs = [(p, a) for p, a in zip(batch, arrays) if p.question_id not in done[d]]
                if pairs:
                    _submit(writer, spec, d, pairs, tokens)
            if progress:
                print(f"synthetic: {min(start + spec.batch_questions, spec.n_questions)}/{spec.n_questions}")
    return _truth(spec, plans, tokens, i_max)


def _question_arrays(spec: SyntheticSpec, plan: QuestionPlan, need_hidden: bool) -> dict[str, Any]:
    layout = question_layout(spec, plan)
    out: dict[str, Any] = dict(logit_arrays(spec, plan))
    out["layout"] = layout
    out["hidden"] = hidden_cube(spec, plan, layout) if need_hidden else None
    return out


def _grid(*sizes: int) -> list[np.ndarray]:
    return [g.reshape(-1) for g in np.meshgrid(*[np.arange(s) for s in sizes], indexing="ij")]


def _submit(writer: Any, spec: SyntheticSpec, depth: int, pairs: Sequence[tuple[QuestionPlan, dict[str, Any]]],
            tokens: dict[tuple[str, int], np.ndarray]) -> None:
    p_full, layers = spec.full_positions, spec.num_layers
    hidden: dict[str, list[np.ndarray]] = {k: [] for k in ("question_id", "turn", "position", "iteration", "layer",
                                                          "values")}
    logit_keys = ("argmax", "top_ids", "top_logprobs", "entropy", "tracked_logprobs")
    logits: dict[str, list[np.ndarray]] = {k: [] for k in ("question_id", "turn", "position", "iteration")
                                           + logit_keys}
    sketch: dict[str, list[np.ndarray]] = {k: [] for k in ("question_id", "turn", "position", "iteration", "layer",
                                                          "top_indices")}
    rows = []
    for plan, arr in pairs:
        qid = plan.question_id
        pos, it, lay = _grid(p_full, depth, layers)
        n = pos.size
        hidden["question_id"].append(np.full(n, qid))
        hidden["turn"].append(np.zeros(n, np.int32))
        hidden["position"].append(pos)
        hidden["iteration"].append(it + 1)
        hidden["layer"].append(lay)
        hidden["values"].append(arr["hidden"][:, :depth].reshape(n, spec.hidden_size))
        pos2, it2 = _grid(p_full, depth)
        logits["question_id"].append(np.full(pos2.size, qid))
        logits["turn"].append(np.zeros(pos2.size, np.int32))
        logits["position"].append(pos2)
        logits["iteration"].append(it2 + 1)
        for key in logit_keys:
            value = arr[key][:, :depth]
            logits[key].append(value.reshape((pos2.size,) + value.shape[2:]))
        if spec.sketch_positions:
            top = sketch_rows(spec, plan, arr["layout"], depth)  # [Ps, depth, L, k]
            pos3, it3, lay3 = _grid(spec.sketch_positions, depth, layers)
            sketch["question_id"].append(np.full(pos3.size, qid))
            sketch["turn"].append(np.zeros(pos3.size, np.int32))
            sketch["position"].append(pos3 + p_full)
            sketch["iteration"].append(it3 + 1)
            sketch["layer"].append(lay3)
            sketch["top_indices"].append(top.reshape(pos3.size, -1))
        rows.append(_generation_row(spec, plan, depth, tokens[(qid, depth)]))
    cat = {k: np.concatenate(v) for k, v in hidden.items()}
    cat_logits = {k: np.concatenate(v) for k, v in logits.items()}
    cat_sketch = {k: np.concatenate(v) for k, v in sketch.items()} if spec.sketch_positions else None
    writer.submit(depth, [p.question_id for p, _ in pairs], generations=pd.DataFrame(rows), hidden=cat,
                  logits=cat_logits, sketch=cat_sketch)


def _generation_row(spec: SyntheticSpec, plan: QuestionPlan, depth: int, token_ids: np.ndarray) -> dict[str, Any]:
    correct = bool(plan.correct[list(spec.depths).index(depth)])
    reference = LETTERS[plan.index % 4]
    wrong = LETTERS[(plan.index + 1 + int(np.sum(token_ids[:4])) % 3) % 4]
    answer = reference if correct else wrong
    text = " ".join(f"t{t}" for t in token_ids.tolist()) + f" Answer: {answer}"
    return {"question_id": plan.question_id, "depth": depth, "turn": 0, "token_ids": token_ids,
            "text": text, "n_tokens": int(token_ids.size), "stop_reason": "max_new_tokens",
            "extracted_answer": answer, "correct": correct, "grader": "synthetic", "depth_policy": "fixed",
            "chosen_depth": depth}


def _questions_frame(spec: SyntheticSpec) -> pd.DataFrame:
    ids = [spec.question_id(i) for i in range(spec.n_questions)]
    return pd.DataFrame({
        "question_id": ids,
        "source": "synthetic",
        "prompt": [f"Synthetic question {i}." for i in range(spec.n_questions)],
        "reference": [LETTERS[i % 4] for i in range(spec.n_questions)],
        "choices": [list(LETTERS) for _ in ids],
        "metadata": [json.dumps({"seed": spec.seed, "index": i}) for i in range(spec.n_questions)],
    })


def _truth(spec: SyntheticSpec, plans: list[QuestionPlan], tokens: dict[tuple[str, int], np.ndarray],
           i_max: int) -> PlantedTruth:
    def stack(name: str) -> np.ndarray:
        return np.stack([getattr(p, name) for p in plans])

    return PlantedTruth(
        spec=spec, question_ids=[p.question_id for p in plans], depths=list(spec.depths),
        kinds=[p.kind for p in plans], correct=stack("correct"), basin=stack("basin"),
        basin_kind=stack("basin_kind"), onset=stack("onset"), swaps=stack("swaps"), divergence=stack("divergence"),
        winners=stack("winners"), flip_basin=stack("flip_basin"), gaps=stack("gaps"), replaced=stack("replaced"),
        halt=stack("halt"), halting_layer=spec.halting_layer_index, halting_dims=spec.halting_dim_list(),
        tokens=tokens)
