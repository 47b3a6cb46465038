"""Label permutations for the out-of-sample LOOCV null (issue 12; ``app:halting_loocv`` gives the paper's test).

Why a permutation null: the paper's binomial test compares the LOOCV successes with the *in-sample* base prediction
rate of the probe trained on every timestep. A probe that memorises its training set calls few timesteps MUST HALT
in sample, while held-out probes fire far more often, so the binomial null is too low and the test rejects where
there is no feature (p = 2.9e-4 at a layer with nothing planted). A permutation test instead repeats the whole LOOCV,
retraining every fold's probe, on label sets drawn under the null, so the null distribution is measured out of sample
by exactly the procedure that produced the observed count.

What is permuted: whole questions' correctness rows (and so their labels, their place among the held-out MUST HALT
questions, and the outcome the halting simulation scores), within strata of equal *correct depth* ``c`` (the first
passing flat depth). Why within ``c``:

* a question labelled at depths ``1..c`` keeps exactly its own timesteps (same turns, same depths), so every
  recorded state stays attached to the question and turn it came from; only which of them is MUST HALT changes;
* the depth structure the labels share with any iteration-readable state (SAFE below ``c``, the label at ``c``) is
  held fixed, so a probe that merely tells iterations or "already correct" apart scores no better than under the
  null: the permutation analogue of the depth-matched null (the paper's MUST HALT timesteps concentrate at
  iteration 1). What is tested is the halting feature itself: among questions at the same correct depth, do the
  states tell the ones that fail at ``c + 1`` (MUST HALT) from the ones that do not (SAFE)?

Under that null the correctness rows within a stratum are exchangeable with respect to the states, so
the Monte Carlo p of the LOOCV's successes against the permuted ones is valid (size at most ``alpha`` at every
``alpha``): the fixed ``(1 + #{null >= observed}) / (1 + n_permutations)``, and the sequential one the LOOCV draws
(:mod:`sst_interp.probe.sequential`).
The number of MUST HALT questions in each stratum, hence the number of LOOCV folds, is the same in every
permutation. A stratum holding only MUST HALT or only SAFE questions has nothing to permute; if every stratum is
like that, every permutation is the observed labelling and ``p = 1``.

**What p can reach, before anything is trained** (:func:`label_arrangements`, issue 58). The permutations can only
produce so many different labellings: per stratum, the arrangements of its questions' correctness rows
(``n! / prod(count of each distinct row)!``), multiplied over the strata. Each is equally likely, the observed one
among them, so the exact permutation p is at least ``1 / arrangements``: with fewer than ``1 / alpha`` (20 at 0.05)
no statistic and no number of permutations can reach p <= alpha, and the LOOCV skips the permutations and says so.
Drawn permutations repeat the observed labelling about once every ``arrangements`` draws, and each repeat counts
against it.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.outcomes import NEVER
from sst_interp.probe.dataset import ProbeData
from sst_interp.probe.labels import correct_depths, make_labels

KEY = ["question_id", "turn", "depth"]


def strata(data: ProbeData) -> dict[int, list[str]]:
    """Recoverable questions grouped by correct depth ``c`` (the permutation strata), in question order."""
    depth = correct_depths(data.labels.correct)
    out: dict[int, list[str]] = {}
    for q in data.labels.correct.index:
        c = int(depth[q])
        if c != NEVER:
            out.setdefault(c, []).append(str(q))
    return out


def label_arrangements(data: ProbeData) -> int:
    """The distinct labellings the permutations can draw (the observed one included): per stratum of
    :func:`strata`, the arrangements of its questions' correctness rows, multiplied over the strata (module
    docstring). 1 when no stratum has anything to permute."""
    correct = data.labels.correct
    rows = correct.to_numpy(dtype=bool)
    pos = {str(q): i for i, q in enumerate(correct.index)}
    total = 1
    for members in strata(data).values():
        patterns = Counter(rows[pos[q]].tobytes() for q in members)
        total *= math.factorial(len(members)) // math.prod(math.factorial(c) for c in patterns.values())
    return total


def permute_labels(data: ProbeData, rng: np.random.Generator) -> ProbeData:
    """``data`` with question correctness rows shuffled within equal-correct-depth strata (module docstring).

    The states ``x`` and ``eval_x`` are untouched; labels are rebuilt with :func:`make_labels` from the permuted
    correctness and the original timesteps' turns, so they follow the single label definition.
    """
    correct = data.labels.correct
    rows = correct.to_numpy(dtype=bool).copy()
    pos = {str(q): i for i, q in enumerate(correct.index)}
    for members in strata(data).values():
        idx = np.array([pos[q] for q in members], dtype=np.int64)
        rows[idx] = rows[rng.permutation(idx)]
    permuted = pd.DataFrame(rows, index=correct.index, columns=correct.columns)
    old = data.labels.timesteps
    labels = make_labels(permuted, old[["question_id", "depth", "turn"]])
    new = labels.timesteps
    # Same correct depth and turns per question, so the timestep keys are the same rows in the same order.
    if len(new) != len(old) or not (new[KEY].to_numpy() == old[KEY].to_numpy()).all():
        raise UsageError("label permutation changed the labelled timesteps; the strata must share correct depths")
    return ProbeData(layer=data.layer, labels=labels, x=data.x, eval_x=data.eval_x,
                     source={**data.source, "permuted": True})
