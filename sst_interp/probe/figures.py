"""Data for ``fig:halt_signal`` (the probe's output over every labelled timestep).

Panels of the paper's figure and the columns that feed them:

* top, per-timestep histogram by class: ``logit`` and ``must_halt``; class means, standard
  deviations and the gap between class means are in :meth:`HaltSignal.summary`
  (MUST HALT mean +3.66, std 1.16; SAFE mean -3.72, std 3.52; gap 7.38 in the paper);
* middle, per-question strip plot: ``question_id``, ``logit``, ``question_kind``
  (``must_halt`` for questions with a MUST HALT timestep, ``continue`` for questions whose
  correct depth is above 1 without one, ``safe`` otherwise);
* bottom, every timestep at its iteration depth: ``depth``, ``logit`` and ``marker``:
  ``detected_halt`` (MUST HALT above threshold), ``missed_halt`` (MUST HALT at or below),
  ``missed_continue`` (a first-turn SAFE timestep above threshold where the simulation halted a
  question that then ended as a miss), ``false_halt_harmless`` (any other SAFE timestep above
  threshold), ``below`` (SAFE at or below threshold).

``fig:feature_position_grid`` data is :func:`sst_interp.probe.features.feature_grid`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from sst_interp.kernels.results import AnalysisResult
from sst_interp.probe.dataset import ProbeData
from sst_interp.probe.evaluate import ProbeEvaluation


@dataclass(frozen=True)
class HaltSignal(AnalysisResult):
    """Per-timestep probe output for ``fig:halt_signal``.

    Args:
        timesteps: one row per labelled timestep: ``question_id``, ``turn``, ``depth``, ``must_halt``,
            ``logit``, ``above_threshold``, ``question_kind``, ``marker`` (module docstring).
        threshold: the halting threshold.
    """

    timesteps: pd.DataFrame
    threshold: float
    label: ClassVar[str] = "fig:halt_signal"

    def summary(self) -> pd.DataFrame:
        """Class mean and standard deviation of the logit, and the gap between class means."""
        rows = []
        for name, flag in (("must_halt", True), ("safe", False)):
            v = self.timesteps.loc[self.timesteps["must_halt"] == flag, "logit"].to_numpy(dtype=np.float64)
            rows.append({"class": name, "n": len(v), "mean": float(v.mean()) if len(v) else np.nan,
                         "std": float(v.std(ddof=1)) if len(v) > 1 else np.nan})
        out = pd.DataFrame(rows)
        out["gap_between_means"] = float(out["mean"].iloc[0] - out["mean"].iloc[1])
        return out

    def table(self) -> pd.DataFrame:
        """The per-timestep rows."""
        return self.timesteps


def halt_signal_data(evaluation: ProbeEvaluation, data: ProbeData) -> HaltSignal:
    """Build :class:`HaltSignal` from an evaluation of a probe on ``data``."""
    ts = data.labels.timesteps.copy()
    det = evaluation.detection
    ts["logit"] = np.asarray(det.logits, dtype=np.float64)
    ts["above_threshold"] = det.predicted
    mh_questions = set(data.labels.must_halt_questions)
    ts["question_kind"] = [
        "must_halt" if q in mh_questions else ("continue" if c > 1 else "safe")
        for q, c in zip(ts["question_id"], ts["correct_depth"])
    ]
    outcome = evaluation.outcome.per_question().set_index("question_id")
    first_turn = ts.groupby("question_id")["turn"].transform("min") == ts["turn"]
    kind = outcome.loc[ts["question_id"], "kind"].to_numpy()
    chosen = outcome.loc[ts["question_id"], "chosen_depth"].to_numpy()
    marker = np.where(ts["must_halt"], np.where(ts["above_threshold"], "detected_halt", "missed_halt"), "below")
    false_halt = ~ts["must_halt"].to_numpy() & ts["above_threshold"].to_numpy()
    caused_miss = first_turn.to_numpy() & (kind == "missed") & (chosen == ts["depth"].to_numpy())
    marker = np.where(false_halt & caused_miss, "missed_continue", np.where(false_halt, "false_halt_harmless", marker))
    ts["marker"] = marker
    return HaltSignal(ts.reset_index(drop=True), det.threshold)
