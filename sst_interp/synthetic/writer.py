"""Writing a planted-truth synthetic run through :class:`~sst_interp.store.RunWriter`, one batch at a time."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.store import RunWriter
from sst_interp.synthetic.arrays import hidden_cube, logit_arrays, question_layout, sketch_rows, token_trace
from sst_interp.synthetic.plan import PlantedArrays, QuestionPlan, plan_question
from sst_interp.synthetic.spec import SyntheticSpec
from sst_interp.synthetic.truth import PlantedTruth

LETTERS = ("A", "B", "C", "D")


def write_synthetic_run(path: str | Path, spec: SyntheticSpec, progress: bool = False) -> PlantedTruth:
    """Write a synthetic run directory at ``path`` (created, or resumed if it holds this spec's run).

    Returns the :class:`PlantedTruth`. Memory: one batch of ``spec.batch_questions`` questions' arrays
    (``[P_full, I_max, L, d]`` float32 hidden states each) plus the truth's ``swaps`` ([Q, P, L, I] int16).
    """

    depths = list(spec.depths)
    i_max = max(depths)
    identity = {"model": "synthetic", "checkpoint": None, "data": f"synthetic:seed={spec.seed}",
                "spec": json.dumps(spec.to_json(), sort_keys=True, default=str)}
    extra = {"hidden_size": spec.hidden_size, "num_layers": spec.num_layers, "dtype": spec.dtype,
             "depths": depths, "full_positions": spec.full_positions, "sketch_positions": spec.sketch_positions,
             "sketch_k": spec.overlap_k, "top_k": spec.top_k, "decoding": "greedy", "prompt_mode": "synthetic",
             "depth_policy": "fixed", "logits_every_iteration": True}  # the logits shard holds every iteration
    if spec.sst is not None:
        extra["sst"] = dict(spec.sst)
    if spec.questions is not None:
        extra["questions"] = spec.questions
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
    stacked = {field.name: np.stack([getattr(p, field.name) for p in plans]) for field in fields(PlantedArrays)}
    return PlantedTruth(
        spec=spec, question_ids=[p.question_id for p in plans], depths=list(spec.depths),
        kinds=[p.kind for p in plans], halting_layer=spec.halting_layer_index, halting_dims=spec.halting_dim_list(),
        tokens=tokens, **stacked)
