"""Tiny planted arrays for the probe tests (no run directory needed).

Correctness patterns over flat depths 1..4 (T = pass) and the timesteps they give:

====  ==========  ========================================
name  pattern     labels (d = 1..c)
====  ==========  ========================================
conv  T T T T     d1 SAFE (flat 2 passes)
mh1   T F F F     d1 MUST HALT
mh2   F T F F     d1 SAFE, d2 MUST HALT
cont  F T T T     d1 SAFE, d2 SAFE
mh3   F F T F     d1 SAFE, d2 SAFE, d3 MUST HALT
late  F F F T     d1..d4 SAFE
none  F F F F     no timesteps (unrecoverable)
alt   T F T F     d1 MUST HALT
two   T T F F     d1 SAFE (the halt feature is on at iteration 2)
====  ==========  ========================================

The planted halt feature lives in ``PLANTED_DIMS``: at a state of depth ``d`` it is on when the
question passes at ``d`` and fails at ``d + 1`` (all planted dims ``+a``), which is the label rule
for ``d <= c``. States of a question still below its correct depth are "hard negatives": all
planted dims ``+a`` except one (cycled over the planted dims) at ``-a``, so every planted dim is
needed to tell them from MUST HALT; other SAFE states have all planted dims at ``-a``. Gaussian
noise (std ``noise``) is added everywhere. ``plant=False`` leaves only the noise.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sst_interp.probe.dataset import ProbeData
from sst_interp.probe.labels import make_labels

PATTERNS: dict[str, tuple[bool, bool, bool, bool]] = {
    "conv": (True, True, True, True),
    "mh1": (True, False, False, False),
    "mh2": (False, True, False, False),
    "cont": (False, True, True, True),
    "mh3": (False, False, True, False),
    "late": (False, False, False, True),
    "none": (False, False, False, False),
    "alt": (True, False, True, False),
    "two": (True, True, False, False),
}
PLANTED_DIMS = (2, 7, 11)


def planted_correctness(n_per_pattern: int) -> pd.DataFrame:
    """``[questions, depths 1..4]`` bool, questions named ``<pattern>-<i>``."""
    rows, index = [], []
    for name, pattern in PATTERNS.items():
        for i in range(n_per_pattern):
            index.append(f"{name}-{i}")
            rows.append(pattern)
    out = pd.DataFrame(rows, index=pd.Index(index, name="question_id"), columns=[1, 2, 3, 4])
    out.columns.name = "depth"
    return out


def planted_turns(correct: pd.DataFrame) -> pd.DataFrame:
    """Every question has turn 0 at every depth; mh1/mh2 questions with even index also have turn 1."""
    rows = []
    for q in correct.index:
        name, i = q.rsplit("-", 1)
        n_turns = 2 if name in ("mh1", "mh2") and int(i) % 2 == 0 else 1
        for d in correct.columns:
            for t in range(n_turns):
                rows.append((q, int(d), t))
    return pd.DataFrame(rows, columns=["question_id", "depth", "turn"])


def planted_data(
    n_per_pattern: int = 4,
    d: int = 16,
    strength: float = 1.0,
    noise: float = 0.1,
    plant: bool = True,
    seed: int = 0,
) -> ProbeData:
    """A :class:`ProbeData` with the halt feature planted in ``PLANTED_DIMS`` (see module docstring)."""
    rng = np.random.default_rng(seed)
    correct = planted_correctness(n_per_pattern)
    labels = make_labels(correct, planted_turns(correct))
    values = correct.to_numpy(dtype=bool)
    i_max = values.shape[1]
    dims = np.array(PLANTED_DIMS)

    def state(qi: int, depth: int) -> np.ndarray:
        v = rng.normal(0.0, noise, size=d).astype(np.float32)
        if not plant:
            return v
        on = values[qi, depth - 1] and depth < i_max and not values[qi, depth]
        first = int(np.argmax(values[qi]) + 1) if values[qi].any() else i_max + 1
        if on:
            v[dims] += strength
        elif depth < first:
            pattern = np.full(len(dims), strength, dtype=np.float32)
            pattern[(qi + depth) % len(dims)] = -strength
            v[dims] += pattern
        else:
            v[dims] -= strength
        return v

    qpos = {q: i for i, q in enumerate(correct.index)}
    eval_x = np.stack([np.stack([state(qi, dd) for dd in range(1, i_max + 1)]) for qi in range(len(correct))])
    x = np.zeros((len(labels.timesteps), d), dtype=np.float32)
    for r, (q, t, dd) in enumerate(labels.timesteps[["question_id", "turn", "depth"]].itertuples(index=False)):
        x[r] = eval_x[qpos[q], dd - 1] if t == 0 else state(qpos[q], int(dd))
    return ProbeData(layer=3, labels=labels, x=x, eval_x=eval_x.astype(np.float32), source={"planted": True})
