"""Held-out (cross-fitted) probe scores: what the layer sweep ranks layers by (issue 12).

Why: the in-sample evaluation of a probe trained on every timestep (``tab:halting_probe``, ``fig:halt_signal``)
shows a clean separation wherever the probe can memorise its training set, feature or not, so it cannot pick a
layer or count as evidence. Here the questions are split into ``k`` folds (every ``k``-th question in question
order, so MUST HALT questions spread over the folds as they are spread over the run); for each fold a fresh probe
(same architecture and recipe) is trained on the other folds' timesteps and scores only the fold's own questions.
Every question's halting simulation and every timestep's logit then come from a probe that never saw that question.

Scores: the held-out halting simulation (correct, overthinks, missed, as ``tab:halting_probe``) and the held-out
AUC of the timestep logits (MUST HALT vs SAFE; 0.5 = no separation). Cost: ``k`` trainings per layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata

from sst_interp.kernels.errors import UsageError
from sst_interp.probe.dataset import ProbeData
from sst_interp.probe.evaluate import DetectionTable, HaltingOutcome, simulate_halting
from sst_interp.probe.model import DEFAULT_THRESHOLD, ProbeConfig
from sst_interp.probe.train import TrainConfig, probe_logits, train_probe

#: Question folds of the cross-fitted scores.
DEFAULT_FOLDS = 5


@dataclass(frozen=True)
class HeldOutScores:
    """Cross-fitted scores of one layer.

    Args:
        outcome: halting simulation on held-out logits.
        detection: timestep detection on held-out logits.
        folds: number of question folds used.
    """

    outcome: HaltingOutcome
    detection: DetectionTable
    folds: int

    @property
    def auc(self) -> float:
        """Held-out AUC of MUST HALT vs SAFE timestep logits (Mann-Whitney, ties count one half)."""
        return auc(np.asarray(self.detection.logits), np.asarray(self.detection.must_halt, dtype=bool))

    def row(self) -> dict[str, object]:
        """Columns for the sweep table (``heldout_*``)."""
        det = self.detection
        mh = np.asarray(det.must_halt, dtype=bool)
        return {
            "heldout_correct": self.outcome.n_correct,
            "heldout_overthinks": self.outcome.overthinks,
            "heldout_missed": self.outcome.missed,
            "heldout_auc": self.auc,
            "heldout_halt_rate_must_halt": float(det.predicted[mh].mean()) if mh.any() else np.nan,
            "heldout_halt_rate_safe": float(det.predicted[~mh].mean()) if (~mh).any() else np.nan,
        }


def auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Area under the ROC curve of ``scores`` for ``positive`` (NaN if a class is empty)."""
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def crossfit(
    data: ProbeData,
    probe_config: ProbeConfig,
    train_config: TrainConfig | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    folds: int = DEFAULT_FOLDS,
) -> HeldOutScores:
    """Cross-fitted halting simulation and detection of ``data`` (module docstring)."""
    data.labels.require_must_halt()
    qids = data.question_ids
    k = min(int(folds), len(data.labels.must_halt_questions))
    if k < 2:
        raise UsageError(f"cross-fitting needs at least 2 MUST HALT questions, the run has "
                         f"{len(data.labels.must_halt_questions)}; record more questions")
    fold_of = {q: i % k for i, q in enumerate(qids)}
    ts_fold = np.array([fold_of[str(q)] for q in data.groups], dtype=np.int64)
    q_fold = np.array([fold_of[q] for q in qids], dtype=np.int64)
    eval_logits = np.zeros(data.eval_x.shape[:2], dtype=np.float64)
    ts_logits = np.zeros(len(data.y), dtype=np.float64)
    y = data.y
    for f in range(k):
        train = ts_fold != f
        if y[train].all() or not y[train].any():
            raise UsageError(f"question fold {f + 1} of {k} leaves one class out of training; use fewer folds")
        probe, _ = train_probe(data.x[train], y[train], probe_config, train_config)
        eval_logits[q_fold == f] = probe_logits(probe, data.eval_x[q_fold == f])
        ts_logits[~train] = probe_logits(probe, data.x[~train])
    outcome = simulate_halting(eval_logits, data.correct, threshold, qids, data.layer)
    detection = DetectionTable(data.labels.timesteps["depth"].to_numpy(), y, ts_logits, threshold)
    return HeldOutScores(outcome, detection, k)
