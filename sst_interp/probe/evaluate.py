"""The halting simulation and its tables (``app:halting_eval``, ``tab:halting_probe``,
``tab:halting_probe_per_iter``).

Procedure: for each question, the probe reads the first-turn position-0 state after iteration
``d = 1, 2, ..., i_max``; the question halts at the first ``d`` whose logit exceeds the
threshold (default ``log(0.3/0.7)``); that depth holds for the rest of the question, so the
question's answer is its flat depth-``d`` answer. A question the probe never halts runs at
``i_max``.

Outcome of each question (``c`` = its staged correct depth, ``h`` = the chosen depth):

* ``correct``: the flat depth-``h`` answer passes;
* ``overthink``: recoverable, wrong at ``h``, and ``h > c`` (it continued past a depth where it passed);
* ``missed``: recoverable, wrong at ``h``, and ``h < c`` (it halted before the depth it needed);
* ``unrecoverable``: no flat depth passes (always wrong, whatever the probe does).

So on recoverable questions correct + overthinks + missed = recoverable count (117 + 0 + 4 = 121
in the paper; every row of ``tab:halting_probe_layer_sweep`` satisfies it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from sst_interp.kernels.results import AnalysisResult
from sst_interp.kernels.stats import mcnemar_exact
from sst_interp.kernels.outcomes import first_correct_depth
from sst_interp.probe.dataset import ProbeData
from sst_interp.probe.model import DEFAULT_THRESHOLD, HaltingProbe
from sst_interp.probe.train import probe_logits


@dataclass(frozen=True)
class HaltingOutcome(AnalysisResult):
    """Question-level result of a halting simulation (``tab:halting_probe``).

    Args:
        question_ids: ``[Q]`` question ids.
        chosen_depth: ``[Q]`` int, the depth each question ran at.
        final_correct: ``[Q]`` bool, correct at the chosen depth.
        kind: ``[Q]`` str, one of ``correct``, ``overthink``, ``missed``, ``unrecoverable``, ``wrong``
            (``wrong`` never occurs: a wrong recoverable question is an overthink or a miss).
        correct: ``[Q, i_max]`` bool flat-depth correctness the simulation used.
        layer: the probe layer (for the table's method name).
    """

    question_ids: tuple[str, ...]
    chosen_depth: np.ndarray
    final_correct: np.ndarray
    kind: np.ndarray
    correct: np.ndarray
    layer: int = -1
    label: ClassVar[str] = "tab:halting_probe"

    @property
    def n_questions(self) -> int:
        """Number of questions evaluated (198 in the paper)."""
        return len(self.question_ids)

    @property
    def n_correct(self) -> int:
        """Questions answered correctly under the probe (117 in the paper)."""
        return int(self.final_correct.sum())

    @property
    def overthinks(self) -> int:
        """Recoverable questions that continued past a passing depth and ended wrong."""
        return int((self.kind == "overthink").sum())

    @property
    def missed(self) -> int:
        """Recoverable questions that halted before the depth they needed."""
        return int((self.kind == "missed").sum())

    @property
    def accuracy(self) -> float:
        """``n_correct / n_questions``."""
        return self.n_correct / self.n_questions if self.n_questions else 0.0

    @property
    def baseline_correct(self) -> int:
        """Questions correct at flat depth 1 (101 in the paper)."""
        return int(self.correct[:, 0].sum())

    @property
    def staged_correct(self) -> int:
        """Questions correct at some flat depth (staged compute capacity; 121 in the paper)."""
        return int(self.correct.any(axis=1).sum())

    def key(self) -> tuple[int, int, int]:
        """``(correct, overthinks, missed)``: what "reproduces the baseline" compares."""
        return (self.n_correct, self.overthinks, self.missed)

    def mcnemar_vs_iter1(self) -> tuple[int, int, float]:
        """Discordant pairs vs flat depth 1 and the exact one-sided McNemar p-value.

        Returns ``(b, c, p)``: ``b`` questions wrong at depth 1 and right under the probe, ``c`` the
        reverse, ``p = P(X >= b | Binomial(b + c, 0.5))`` (16 vs 0 gives 1.5e-5 in the paper).
        """
        base = self.correct[:, 0]
        b = int((~base & self.final_correct).sum())
        c = int((base & ~self.final_correct).sum())
        p = mcnemar_exact(b, c, alternative="greater").pvalue if b + c > 0 else 1.0
        return b, c, float(p)

    def depth_breakdown(self) -> pd.DataFrame:
        """Correct questions by the depth the probe chose (27/74/9/7 in the paper)."""
        i_max = self.correct.shape[1]
        depths = np.arange(1, i_max + 1)
        counts = [int(((self.chosen_depth == d) & self.final_correct).sum()) for d in depths]
        return pd.DataFrame({"depth": depths, "correct": counts})

    def per_question(self) -> pd.DataFrame:
        """One row per question: chosen depth, correctness, outcome kind."""
        return pd.DataFrame(
            {
                "question_id": list(self.question_ids),
                "chosen_depth": self.chosen_depth,
                "correct": self.final_correct,
                "kind": self.kind,
            }
        )

    def table(self) -> pd.DataFrame:
        """Rows: iter = 1, the probe, staged capacity; accuracy, delta vs iter 1, overthinks, missed."""
        n = max(self.n_questions, 1)
        i_max = self.correct.shape[1]
        base = self.baseline_correct / n
        name = f"Halt signal probe (layer {self.layer})" if self.layer >= 0 else "Halt signal probe"
        rows = [
            ("SST iter = 1", self.baseline_correct, base, np.nan, None, None),
            (name, self.n_correct, self.accuracy, 100 * (self.accuracy - base), self.overthinks, self.missed),
            (f"Staged compute capacity (i_max = {i_max})", self.staged_correct, self.staged_correct / n,
             100 * (self.staged_correct / n - base), None, None),
        ]
        columns = ["method", "correct", "accuracy", "delta_pp_vs_iter1", "overthinks", "missed"]
        return pd.DataFrame(rows, columns=columns)


def simulate_halting(
    logits: np.ndarray,
    correct: np.ndarray,
    threshold: float = DEFAULT_THRESHOLD,
    question_ids: list[str] | None = None,
    layer: int = -1,
) -> HaltingOutcome:
    """Run the halting rule on precomputed logits.

    Args:
        logits: ``[Q, i_max]`` halt logit of each question's first-turn position-0 state after iteration d.
        correct: ``[Q, i_max]`` bool flat-depth correctness.
        threshold: halt when ``logit > threshold``.
        question_ids: ``[Q]`` ids (default ``"0"..``).
        layer: probe layer, for labelling.
    """
    logits = np.asarray(logits, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    q, i_max = correct.shape
    above = logits > threshold
    chosen = np.where(above.any(axis=1), above.argmax(axis=1) + 1, i_max)
    final = correct[np.arange(q), chosen - 1]
    recoverable = correct.any(axis=1)
    first = first_correct_depth(range(1, i_max + 1), correct)  # NEVER only where not recoverable (masked below)
    kind = np.full(q, "unrecoverable", dtype=object)
    kind[final] = "correct"
    wrong_rec = recoverable & ~final
    kind[wrong_rec & (chosen > first)] = "overthink"
    kind[wrong_rec & (chosen < first)] = "missed"
    ids = tuple(question_ids) if question_ids is not None else tuple(str(i) for i in range(q))
    return HaltingOutcome(ids, chosen.astype(np.int64), final, kind.astype(str), correct, layer)


@dataclass(frozen=True)
class DetectionTable(AnalysisResult):
    """Per-iteration MUST HALT detection and SAFE correctness (``tab:halting_probe_per_iter``).

    Args:
        depth: ``[n]`` iteration depth of each labelled timestep.
        must_halt: ``[n]`` bool label.
        logits: ``[n]`` probe logit.
        threshold: the halting threshold.
    """

    depth: np.ndarray
    must_halt: np.ndarray
    logits: np.ndarray
    threshold: float = DEFAULT_THRESHOLD
    label: ClassVar[str] = "tab:halting_probe_per_iter"

    @property
    def predicted(self) -> np.ndarray:
        """``[n]`` bool: the probe says halt (logit above threshold)."""
        return np.asarray(self.logits) > self.threshold

    @property
    def halt_detected(self) -> int:
        """MUST HALT timesteps above threshold (68/68 in the paper)."""
        return int((self.predicted & self.must_halt).sum())

    @property
    def safe_left_alone(self) -> int:
        """SAFE timesteps at or below threshold (257/289 for the 64-neuron probe)."""
        return int((~self.predicted & ~self.must_halt).sum())

    @property
    def base_prediction_rate(self) -> float:
        """Fraction of all labelled timesteps classified MUST HALT (133/357 = 37.3% in the paper)."""
        return float(self.predicted.mean()) if len(self.predicted) else 0.0

    @property
    def n_predicted_halt(self) -> int:
        """Timesteps classified MUST HALT (133 in the paper)."""
        return int(self.predicted.sum())

    def table(self) -> pd.DataFrame:
        """Rows per depth plus a total: MUST HALT total/detected, SAFE total/left alone."""
        rows = []
        pred, mh = self.predicted, np.asarray(self.must_halt, dtype=bool)
        for d in sorted({int(v) for v in self.depth}):
            at = np.asarray(self.depth) == d
            rows.append((f"iter = {d}", int((mh & at).sum()), int((mh & at & pred).sum()),
                         int((~mh & at).sum()), int((~mh & at & ~pred).sum())))
        rows.append(("Total", int(mh.sum()), self.halt_detected, int((~mh).sum()), self.safe_left_alone))
        out = pd.DataFrame(rows, columns=["depth", "must_halt_total", "must_halt_detected", "safe_total",
                                          "safe_left_alone"])
        with np.errstate(invalid="ignore", divide="ignore"):
            out["must_halt_rate"] = out["must_halt_detected"] / out["must_halt_total"].replace(0, np.nan)
            out["safe_rate"] = out["safe_left_alone"] / out["safe_total"].replace(0, np.nan)
        return out


@dataclass(frozen=True)
class ProbeEvaluation:
    """A probe evaluated on a :class:`ProbeData`: question outcomes plus timestep detection.

    Args:
        outcome: the halting simulation (:class:`HaltingOutcome`).
        detection: timestep-level detection (:class:`DetectionTable`).
        eval_logits: ``[Q, i_max]`` logits used by the simulation.
    """

    outcome: HaltingOutcome
    detection: DetectionTable
    eval_logits: np.ndarray

    def row(self) -> dict[str, object]:
        """Summary row used by the sweep and ablation tables."""
        o, det = self.outcome, self.detection
        mh = int(np.asarray(det.must_halt).sum())
        safe = len(det.must_halt) - mh
        return {
            "correct": o.n_correct,
            "n_questions": o.n_questions,
            "accuracy": o.accuracy,
            "delta_pp_vs_iter1": 100 * (o.accuracy - o.baseline_correct / max(o.n_questions, 1)),
            "overthinks": o.overthinks,
            "missed": o.missed,
            "halt_detected": det.halt_detected,
            "must_halt_total": mh,
            "safe_left_alone": det.safe_left_alone,
            "safe_total": safe,
        }


def evaluate_probe(
    probe: HaltingProbe,
    data: ProbeData,
    threshold: float = DEFAULT_THRESHOLD,
    input_mask: np.ndarray | None = None,
    neuron_mask: np.ndarray | None = None,
) -> ProbeEvaluation:
    """Halting simulation and timestep detection of ``probe`` on ``data``.

    Args:
        probe: a trained probe.
        data: labels, ``x: [n, d]`` and ``eval_x: [Q, i_max, d]``.
        threshold: halting threshold on the logit.
        input_mask: ``[d]`` 0/1, zeroes input dimensions (input-dimension ablation).
        neuron_mask: ``[n_hidden]`` 0/1, zeroes hidden units (neuron ablation).
    """
    eval_logits = probe_logits(probe, data.eval_x, input_mask, neuron_mask)
    ts_logits = probe_logits(probe, data.x, input_mask, neuron_mask)
    outcome = simulate_halting(eval_logits, data.correct, threshold, data.question_ids, data.layer)
    ts = data.labels.timesteps
    detection = DetectionTable(ts["depth"].to_numpy(), data.y, ts_logits, threshold)
    return ProbeEvaluation(outcome, detection, eval_logits)
