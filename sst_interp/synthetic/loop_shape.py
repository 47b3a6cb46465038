"""A planted-truth synthetic run of a non-SST loop shape: a looped block of a few layers inside a stack.

Layers ``loop_start .. loop_end-1`` of ``num_layers`` run once per pass, ``depth`` passes per token; the layers
before and after the block run once (iteration 1 only: ``Run.hidden`` is NaN for them at iterations >= 2), as in
Inkling-2 Loop. The manifest names the shape as a family (``family: looped_block``, and a ``loop`` object with the
keys of :meth:`~sst_interp.model.loop_declaration.LoopDeclaration.describe`), so every measurement reads it as it reads a
recorded family run.

What is planted, exactly, at every looped layer, question and full position (the same values everywhere, so a mean
over positions is the planted value itself):

- **Top-k overlap between consecutive passes** ``overlap[i-2]`` (transition i-1 -> i; ``k = sketch_k``, a multiple
  of 1/k): ``(1 - overlap) k`` dimensions of the top-k by |value| are swapped out, always dimensions of pass 1's
  top-k that were never swapped out before, for dimensions never in any top-k; so the overlap between passes a < b
  is ``1 - (M_b - M_a) / k`` with ``M_i`` the swaps up to pass i.
- **Relative L2 change** ``relative_change[i-2]`` = ||s_i - s_{i-1}|| / ||s_{i-1}||: s_i = a P s_{i-1}, where P
  swaps the values of the swapped dimensions (norm-preserving) and a > 0 solves the quadratic that gives the
  planted ratio (computed in float64; the run stores float32).
- **Correctness** per question and depth (``correct``, or drawn with probability 1/2): accuracy and staged capacity
  per depth follow.

The state is positive everywhere: top-k values in [1.0, 1.05], the rest in [0.8, 0.95] (times the running scale),
so a swap moves exactly the dimensions it names across the top-k boundary and no tie arises.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.kernels.errors import UsageError
from sst_interp.store import RunWriter
from sst_interp.synthetic.spec import scaled_k

FAMILY = "looped_block"
_TOP, _REST = (1.0, 1.05), (0.8, 0.95)


@dataclass(frozen=True)
class LoopShapeSpec:
    """Sizes and plants of a looped-block synthetic run.

    Args:
        n_questions: questions.
        depths: passes of the block recorded (a run at depth D records passes 1..D).
        num_layers: layers of the stack.
        loop_start: first looped layer.
        loop_end: one past the last looped layer (the carried state is layer ``loop_end - 1``'s output).
        full_positions: generated positions recorded in full.
        hidden_size: d.
        sketch_k: k of the top-k overlap (the manifest's ``sketch_k``); None: round(d * 1024 / 5376), the k every
            overlap measurement takes by default.
        vocab_size: token ids are drawn from [0, vocab_size).
        top_k: K of the per-iteration top-K logits.
        overlap: per transition i-1 -> i (i = 2..max depth), the planted top-k overlap.
        relative_change: per transition, the planted relative L2 change.
        correct: optional [n_questions][len(depths)] correctness; None draws it from the seed.
        seed: seed of every draw.
    """

    n_questions: int = 8
    depths: tuple[int, ...] = (1, 2, 3, 4)
    num_layers: int = 6
    loop_start: int = 2
    loop_end: int = 5
    full_positions: int = 3
    hidden_size: int = 64
    sketch_k: int | None = None
    vocab_size: int = 96
    top_k: int = 8
    overlap: tuple[float, ...] = (0.5, 0.75, 11 / 12)
    relative_change: tuple[float, ...] = (0.4, 0.2, 0.1)
    correct: tuple[tuple[bool, ...], ...] | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        depth = max(self.depths, default=0)
        if not self.depths or min(self.depths) < 1:
            raise UsageError(f"depths must be positive integers, got {self.depths}")
        if not 0 <= self.loop_start < self.loop_end <= self.num_layers:
            raise UsageError(f"the looped block {self.loop_start}..{self.loop_end - 1} must lie inside layers "
                             f"0..{self.num_layers - 1}")
        for name in ("overlap", "relative_change"):
            if len(getattr(self, name)) != depth - 1:
                raise UsageError(f"{name} needs one value per transition 2..{depth} ({depth - 1}), got "
                                 f"{len(getattr(self, name))}")
        swaps, k = self.swaps(), self.k
        if any(abs((k - m) / k - o) > 1e-12 for m, o in zip(swaps, self.overlap)):
            raise UsageError(f"each overlap must be a multiple of 1/k (1/{k}), got {self.overlap}")
        if sum(swaps) > min(k, self.hidden_size - k):
            raise UsageError(f"{sum(swaps)} swaps in all exceed the {k} top-k dimensions or the "
                             f"{self.hidden_size - k} others")
        if any(r <= 0 for r in self.relative_change):
            raise UsageError(f"relative changes must be > 0, got {self.relative_change}")
        if self.correct is not None and np.asarray(self.correct).shape != (self.n_questions, len(self.depths)):
            raise UsageError(f"correct must be [n_questions][len(depths)] = [{self.n_questions}][{len(self.depths)}]")

    @property
    def k(self) -> int:
        """k of the planted top-k overlap: ``sketch_k``, or round(d * 1024 / 5376) (the analyses' default)."""
        return int(self.sketch_k) if self.sketch_k is not None else scaled_k(self.hidden_size)

    def swaps(self) -> list[int]:
        """Dimensions swapped out of the top-k at each transition: ``round((1 - overlap) k)``."""
        return [int(round((1.0 - o) * self.k)) for o in self.overlap]

    def question_id(self, index: int) -> str:
        """Id of question ``index``."""
        return f"loop{index:04d}"

    @property
    def state_layer(self) -> int:
        """The layer whose output carries from pass to pass: the block's last."""
        return self.loop_end - 1


def _layer_names(spec: LoopShapeSpec) -> list[str]:
    return [f"layers.{i}" for i in range(spec.num_layers)]


def _visits(spec: LoopShapeSpec, depth: int) -> list[tuple[int, int]]:
    before = [(1, layer) for layer in range(spec.loop_start)]
    looped = [(p, layer) for p in range(1, depth + 1) for layer in range(spec.loop_start, spec.loop_end)]
    return before + looped + [(1, layer) for layer in range(spec.loop_end, spec.num_layers)]


def describe(spec: LoopShapeSpec) -> dict[str, Any]:
    """The manifest's ``loop`` object of the shape: the keys :meth:`LoopDeclaration.describe` writes for a recorded
    family (this package sits below the model layer, so the shape states them itself; a test pins the keys)."""
    counts = {}
    for depth in spec.depths:
        per_layer = [0] * spec.num_layers
        for _, layer in _visits(spec, depth):
            per_layer[layer] += 1
        counts[str(depth)] = per_layer
    return {"family": FAMILY, "layers": _layer_names(spec),
            "carries": "the looped block's output, from each pass to the next (planted)",
            "depth_meaning": "passes of the looped block; layers before and after it run once", "depth_key": "passes",
            "exits": "after any pass of the looped block", "lens": "planted per-iteration logits",
            "iterations_per_layer": counts, "state_layer": spec.state_layer,
            # the planted per-iteration logits are the run's emitted distribution by construction
            "lens_is_output": True, "settings": {}}


@dataclass(frozen=True)
class LoopShapeTruth:
    """What :func:`write_loop_shape_run` planted.

    Attributes:
        spec: the spec.
        question_ids: [Q].
        correct: [Q, len(depths)] bool.
        overlap: {(a, b): top-k overlap between passes a < b} at every looped layer and position.
        relative_change: {i: ||s_i - s_{i-1}|| / ||s_{i-1}||} for i >= 2.
    """

    spec: LoopShapeSpec
    question_ids: list[str]
    correct: np.ndarray
    overlap: dict[tuple[int, int], float]
    relative_change: dict[int, float]

    def accuracy_pct(self) -> list[float]:
        """Accuracy per depth, in percent."""
        return [100.0 * float(c) for c in self.correct.mean(axis=0)]

    def staged_capacity_pct(self) -> list[float]:
        """Percent of questions correct at any depth <= D, per depth."""
        return [100.0 * float(c) for c in np.maximum.accumulate(self.correct, axis=1).mean(axis=0)]


def _trajectory(spec: LoopShapeSpec, rng: np.random.Generator, depth: int) -> np.ndarray:
    """[depth, d] float64: one looped layer's state at passes 1..depth, with the planted swaps and changes."""
    d, k = spec.hidden_size, spec.k
    order = rng.permutation(d)
    top, rest = order[:k], order[k:]
    state = np.empty(d)
    state[top] = rng.uniform(*_TOP, size=k)
    state[rest] = rng.uniform(*_REST, size=d - k)
    demotable, fresh = list(rng.permutation(top)), list(rng.permutation(rest))
    out = [state]
    for m, r in zip(spec.swaps()[:depth - 1], spec.relative_change):
        out_dims, in_dims = [demotable.pop() for _ in range(m)], [fresh.pop() for _ in range(m)]
        swapped = state.copy()
        swapped[out_dims], swapped[in_dims] = state[in_dims], state[out_dims]
        c = float(swapped @ state) / float(state @ state)
        disc = c * c - 1.0 + r * r
        if disc < 0:
            raise UsageError(f"a relative change of {r} is too small for {m} swaps (at least "
                             f"{np.sqrt(1 - c * c):.3f} here); plant a larger change or fewer swaps")
        state = (c + np.sqrt(disc)) * swapped
        out.append(state)
    return np.stack(out)


def _logits(spec: LoopShapeSpec, rng: np.random.Generator, depth: int) -> dict[str, np.ndarray]:
    """[P, depth, ...] per-iteration logit summaries from random log-softmaxes (consistent, not planted)."""
    p_full, big_k = spec.full_positions, spec.top_k
    z = rng.normal(scale=3.0, size=(p_full, 1, spec.vocab_size)) + rng.normal(size=(p_full, depth, spec.vocab_size))
    logprobs = z - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True)) - z.max(-1, keepdims=True)
    top = np.argsort(-logprobs, axis=-1, kind="stable")[..., :big_k]
    first = np.broadcast_to(top[:, :1], top.shape)
    return {"argmax": top[..., 0].astype(np.int32), "top_ids": top.astype(np.int32),
            "top_logprobs": np.take_along_axis(logprobs, top, -1).astype(np.float32),
            "entropy": (-(np.exp(logprobs) * logprobs).sum(-1)).astype(np.float32),
            "tracked_logprobs": np.take_along_axis(logprobs, first, -1).astype(np.float32)}


def write_loop_shape_run(path: str | Path, spec: LoopShapeSpec | None = None) -> LoopShapeTruth:
    """Write the looped-block run of ``spec`` at ``path`` (see the module docstring); returns what was planted.

    Every draw comes from ``numpy.random.default_rng([seed, question, stream])``: states and logits do not depend
    on the depth recorded (a depth-D run holds passes 1..D of the same trajectory)."""

    spec = spec or LoopShapeSpec()
    depths, deepest = list(spec.depths), max(spec.depths)
    ids = [spec.question_id(q) for q in range(spec.n_questions)]
    correct = (np.asarray(spec.correct, dtype=bool) if spec.correct is not None
               else np.random.default_rng([spec.seed, 7]).random((spec.n_questions, len(depths))) < 0.5)
    identity = {"model": "synthetic", "family": FAMILY, "spec": json.dumps(asdict(spec), sort_keys=True)}
    extra = {"hidden_size": spec.hidden_size, "num_layers": spec.num_layers, "dtype": "float32", "depths": depths,
             "full_positions": spec.full_positions, "sketch_positions": 0, "sketch_k": spec.k,
             "top_k": spec.top_k, "decoding": "greedy", "prompt_mode": "none", "depth_policy": "fixed",
             "logits_every_iteration": True, "family": FAMILY, "loop": describe(spec),
             "vocab_size": spec.vocab_size}
    visited = {d: _visits(spec, d) for d in depths}
    with RunWriter.create_or_resume(path, identity, extra) as writer:
        writer.write_questions(pd.DataFrame({
            "question_id": ids, "source": "synthetic", "prompt": [f"Looped question {q}." for q in ids],
            "reference": ["A"] * len(ids), "choices": [["A", "B"] for _ in ids],
            "metadata": [json.dumps({"seed": spec.seed, "index": q}) for q in range(len(ids))]}))
        for question, qid in enumerate(ids):
            # [P, deepest, L, d]: NaN where the shape never visits (a layer outside the block after pass 1)
            states = np.full((spec.full_positions, deepest, spec.num_layers, spec.hidden_size), np.nan)
            for position in range(spec.full_positions):
                for layer in range(spec.num_layers):
                    rng = np.random.default_rng([spec.seed, question, position, layer])
                    if spec.loop_start <= layer < spec.loop_end:
                        states[position, :, layer] = _trajectory(spec, rng, deepest)
                    else:
                        states[position, 0, layer] = rng.uniform(*_REST, size=spec.hidden_size)
            logits = _logits(spec, np.random.default_rng([spec.seed, question, 1_000_003]), deepest)
            for column, depth in enumerate(depths):
                if qid in writer.completed(depth):
                    continue
                cells = [(p, i, layer) for p in range(spec.full_positions) for i, layer in visited[depth]]
                hidden = {"question_id": np.full(len(cells), qid), "turn": np.zeros(len(cells), np.int32),
                          "position": np.array([c[0] for c in cells]), "iteration": np.array([c[1] for c in cells]),
                          "layer": np.array([c[2] for c in cells]),
                          "values": np.stack([states[p, i - 1, layer] for p, i, layer in cells]).astype(np.float32)}
                grid = [(p, i) for p in range(spec.full_positions) for i in range(1, depth + 1)]
                table = {"question_id": np.full(len(grid), qid), "turn": np.zeros(len(grid), np.int32),
                         "position": np.array([p for p, _ in grid]), "iteration": np.array([i for _, i in grid])}
                table.update({name: np.stack([value[p, i - 1] for p, i in grid]) for name, value in logits.items()})
                tokens = logits["argmax"][:, depth - 1].astype(np.int64)
                answer = "A" if correct[question, column] else "B"
                row = {"question_id": qid, "depth": depth, "turn": 0, "token_ids": tokens,
                       "text": " ".join(f"t{t}" for t in tokens) + f" Answer: {answer}", "n_tokens": len(tokens),
                       "stop_reason": "max_new_tokens", "extracted_answer": answer,
                       "correct": bool(correct[question, column]), "grader": "synthetic", "depth_policy": "fixed",
                       "chosen_depth": depth}
                writer.submit(depth, [qid], generations=pd.DataFrame([row]), hidden=hidden, logits=table)
    cumulative = np.concatenate([[0], np.cumsum(spec.swaps())])
    # shared dimensions / k, computed as an overlap measurement computes it (so the planted float is the measured one)
    overlap = {(a, b): float(spec.k - (cumulative[b - 1] - cumulative[a - 1])) / spec.k
               for a in range(1, deepest + 1) for b in range(a + 1, deepest + 1)}
    change = {i: float(spec.relative_change[i - 2]) for i in range(2, deepest + 1)}
    return LoopShapeTruth(spec=spec, question_ids=ids, correct=correct, overlap=overlap, relative_change=change)
