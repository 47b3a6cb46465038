"""A run whose states are planted: each recorded state is a sparse sum of known unit directions, written through the
suite's own RunWriter, so the features code reads it exactly as it reads a recording."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from sst_interp.store import RunWriter


def planted_directions(n_features: int, d: int, seed: int = 0) -> np.ndarray:
    """[n_features, d] float32 unit rows drawn from a seeded Gaussian."""
    rows = np.random.default_rng(seed).standard_normal((n_features, d))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def planted_states(directions: np.ndarray, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """[n, d] float32: each row the sum of ``k`` distinct directions with magnitudes uniform in [1, 2]."""
    picks = np.argsort(rng.random((n, len(directions))), axis=1)[:, :k]
    codes = np.zeros((n, len(directions)), dtype=np.float32)
    np.put_along_axis(codes, picks, rng.uniform(1.0, 2.0, (n, k)).astype(np.float32), axis=1)
    return codes @ directions


def write_planted_run(path: Path, directions: np.ndarray, *, questions: int = 40, depths: tuple[int, ...] = (1, 2),
                      num_layers: int = 2, positions: int = 4, k: int = 2, seed: int = 0, hidden: bool = True,
                      family: dict | None = None) -> Path:
    """A completion run at ``path``: ``questions`` questions at each depth, ``positions`` full positions, every
    (position, iteration, layer) state planted (:func:`planted_states`); ``hidden`` False writes no hidden shards
    (logits only); ``family`` adds manifest keys (``family``, ``loop``) of a natively looping family's run."""
    rng = np.random.default_rng(seed)
    d = directions.shape[1]
    ids = [f"planted-{i:04d}" for i in range(questions)]
    extra = {"hidden_size": d, "num_layers": num_layers, "dtype": "float32", "depths": list(depths),
             "full_positions": positions, "sketch_positions": 0, "top_k": 2, "prompt_mode": "none",
             "decoding": {"max_new_tokens": positions}, **(family or {})}
    with RunWriter.create_or_resume(path, {"model": "planted", "seed": seed}, extra) as writer:
        writer.write_questions(pd.DataFrame({"question_id": ids, "source": "planted", "prompt": ids,
                                             "reference": "1", "choices": [[] for _ in ids],
                                             "metadata": [json.dumps({"index": i}) for i in range(questions)]}))
        for depth in depths:
            grid = [g.reshape(-1) for g in np.meshgrid(np.arange(positions), np.arange(1, depth + 1),
                                                       np.arange(num_layers), indexing="ij")]
            rows = grid[0].size
            hidden_cols = {"question_id": np.repeat(ids, rows), "turn": np.zeros(rows * questions, np.int32),
                           "position": np.tile(grid[0], questions), "iteration": np.tile(grid[1], questions),
                           "layer": np.tile(grid[2], questions),
                           "values": planted_states(directions, rows * questions, k, rng)}
            logit_grid = [g.reshape(-1) for g in np.meshgrid(np.arange(positions), np.arange(1, depth + 1),
                                                             indexing="ij")]
            n = logit_grid[0].size * questions
            logits = {"question_id": np.repeat(ids, logit_grid[0].size), "turn": np.zeros(n, np.int32),
                      "position": np.tile(logit_grid[0], questions), "iteration": np.tile(logit_grid[1], questions),
                      "argmax": np.zeros(n, np.int32), "top_ids": np.zeros((n, 2), np.int32),
                      "top_logprobs": np.full((n, 2), -0.7, np.float32), "entropy": np.ones(n, np.float32),
                      "tracked_logprobs": np.full((n, 2), -0.7, np.float32)}
            generations = pd.DataFrame([{
                "question_id": q, "depth": depth, "turn": 0, "token_ids": np.ones(positions, np.int32),
                "text": "1", "n_tokens": positions, "stop_reason": "max_new_tokens", "extracted_answer": "1",
                "correct": True, "grader": "planted", "depth_policy": f"fixed({depth})", "chosen_depth": depth}
                for q in ids])
            writer.submit(depth, ids, generations=generations, hidden=hidden_cols if hidden else None, logits=logits)
    return path
