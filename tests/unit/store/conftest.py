"""Fixtures for the store tests: tiny synthetic batches with known values."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pytest

D = 8
LAYERS = 3
TOP_K = 4
SKETCH_K = 3


def question_frame(ids: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "question_id": list(ids),
            "source": ["demo"] * len(ids),
            "prompt": [f"Q: {i}?\nA:" for i in ids],
            "reference": [str(len(i)) for i in ids],
            "choices": [[] for _ in ids],
            "metadata": ["{}" for _ in ids],
        }
    )


def planted_value(qid: str, depth: int, turn: int, position: int, iteration: int, layer: int) -> np.ndarray:
    """A value vector that encodes its own coordinates, so a misplaced row is detected. [D] float32."""
    base = (sum(map(ord, qid)) * 1000 + depth * 100 + turn * 50 + position * 10 + iteration) * 1.0 + layer / 8
    return (base + np.arange(D, dtype=np.float32) / 16).astype(np.float32)


def make_batch(question_ids: Sequence[str], depth: int, positions: int = 2, turns: int = 1,
               shuffle: bool = False) -> dict[str, Any]:
    """Columns for hidden/logits/sketch/gates and generation rows for one batch at ``depth``."""
    rows = [
        (q, t, p, i, layer)
        for q in question_ids
        for t in range(turns)
        for p in range(positions)
        for i in range(1, depth + 1)
        for layer in range(LAYERS)
    ]
    if shuffle:
        rng = np.random.default_rng(0)
        rows = [rows[j] for j in rng.permutation(len(rows))]
    q, t, p, i, layer = (np.array(c) for c in zip(*rows))
    values = np.stack([planted_value(*(r[:1] + (depth,) + r[1:])) for r in rows])
    hidden = {"question_id": q, "turn": t, "position": p, "iteration": i, "layer": layer, "values": values}
    sketch = {"question_id": q, "turn": t, "position": p, "iteration": i, "layer": layer,
              "top_indices": np.argsort(-np.abs(values), axis=1)[:, :SKETCH_K].astype(np.int32)}
    gates = {"question_id": q, "turn": t, "position": p, "iteration": i, "layer": layer,
             "active_fraction": (layer + 1) / 10 + i / 100,
             "sign_bits": np.packbits(values > values.mean(axis=1, keepdims=True), axis=1)}
    lrows = sorted({r[:4] for r in rows})
    lq, lt, lp, li = (np.array(c) for c in zip(*lrows))
    n = len(lrows)
    top_ids = (np.arange(TOP_K)[None, :] + lp[:, None] * 10 + li[:, None]).astype(np.int32)
    logits = {"question_id": lq, "turn": lt, "position": lp, "iteration": li, "argmax": top_ids[:, 0],
              "top_ids": top_ids, "top_logprobs": -np.arange(1, TOP_K + 1, dtype=np.float32)[None, :].repeat(n, 0),
              "entropy": (li / 10).astype(np.float32),
              "tracked_logprobs": -li[:, None] * np.ones((n, TOP_K), np.float32)}
    generations = [
        {"question_id": qid, "turn": turn, "token_ids": [1, 2, 3], "text": f"{qid} answer", "n_tokens": 3,
         "stop_reason": "eos", "extracted_answer": "3", "correct": depth % 2 == 1, "grader": "exact"}
        for qid in question_ids for turn in range(turns)
    ]
    return {"generations": generations, "hidden": hidden, "logits": logits, "sketch": sketch, "gates": gates}


def extra(dtype: str = "float32") -> dict[str, Any]:
    return {"hidden_size": D, "num_layers": LAYERS, "dtype": dtype, "depths": [1, 2], "top_k": TOP_K,
            "sketch_k": SKETCH_K, "full_positions": 2, "sketch_positions": 0}


IDENTITY = {"model": "tiny", "checkpoint": None, "data": "sha256:abc"}


@pytest.fixture
def batch_factory() -> Callable[..., dict[str, Any]]:
    return make_batch


@pytest.fixture
def planted() -> Callable[..., np.ndarray]:
    return planted_value


@pytest.fixture
def run_settings() -> dict[str, Any]:
    return {"identity": dict(IDENTITY), "extra": extra, "questions": question_frame, "D": D, "LAYERS": LAYERS,
            "TOP_K": TOP_K, "SKETCH_K": SKETCH_K}
