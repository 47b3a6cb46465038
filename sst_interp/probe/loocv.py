"""Generalisation versus memorisation: LOOCV and Cover's bound (``app:halting_loocv``,
``sec:halting_probe_generalisation``).

LOOCV: each MUST HALT question is held out in turn; a fresh probe is trained from scratch on
every other timestep (same architecture, seed, epochs, class balancing) and the full halting
evaluation is run with it. A fold succeeds when the held-out question is correctly classified.
Two readings of "correctly classified" are offered (``criterion``):

* ``"outcome"`` (default): in the halting simulation with the fold's probe the held-out
  question ends correct (it halts at a depth where it passes, so its MUST HALT was acted on);
* ``"detection"``: every MUST HALT timestep of the held-out question is above threshold.

Null hypothesis (memorisation): the probe classifies an unseen question as MUST HALT at its
base prediction rate, the fraction of all labelled timesteps the probe trained on everything
calls MUST HALT (133/357 = 0.373 in the paper). Test: one-sided exact binomial
``P(X >= successes | Binomial(folds, base rate))`` (29/48 gives 9.4e-4) with a one-sided 95%
Wilson interval on the held-out accuracy (``[48.6%, 100%]`` for 29/48).

A stricter, depth-matched null is reported beside it (not in the paper): MUST HALT timesteps
concentrate at iteration 1 (60 of 68 in the paper), and a probe can tell iterations apart
without reading any halting feature, so each fold's null probability is the full probe's
predicted-halt rate among all timesteps at the held-out question's MUST HALT depths, and the
successes are tested against the Poisson-binomial of those per-fold probabilities
(``scipy.stats.poisson_binom``).

Both nulls above are measured *in sample* and do not hold their size: a probe that memorises its training set
has a low in-sample base rate while held-out probes fire on most timesteps, so at a layer with nothing planted
the binomial test gives p = 2.9e-4 (issue 12). The calibrated test is the label-permutation test
(:mod:`~sst_interp.probe.permutation`): the same LOOCV, every fold's probe retrained, on ``permutations``
labellings drawn within equal-correct-depth strata; ``p_permutation = (1 + #{null >= observed}) / (1 +
permutations)``. The binomial p (``p_binomial``, also ``p_value``) stays to reproduce the paper's numbers from its
counts; report both, and read significance from ``p_permutation``. Cost: ``(1 + permutations) x folds`` probe
trainings (the paper's data: 101 x 48 = 4,848).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import pandas as pd
from scipy.stats import poisson_binom

from sst_interp.kernels.results import AnalysisResult
from sst_interp.kernels.stats import binomial_test, wilson_interval
from sst_interp.kernels.errors import UsageError
from sst_interp.probe.dataset import ProbeData
from sst_interp.probe.defaults import DEFAULT_PERMUTATIONS
from sst_interp.probe.evaluate import evaluate_probe
from sst_interp.probe.model import DEFAULT_THRESHOLD, ProbeConfig
from sst_interp.probe.permutation import permutation_p_value, permute_labels
from sst_interp.probe.train import TrainConfig, train_probe

Criterion = Literal["outcome", "detection"]



@dataclass(frozen=True)
class LoocvResult(AnalysisResult):
    """LOOCV over the MUST HALT questions with the paper's binomial test and the permutation test.

    Args:
        folds: one row per held-out question: ``question_id``, ``success``, ``kind`` (its outcome in
            the fold's halting simulation), ``chosen_depth``, ``must_halt_detected`` (all its MUST HALT
            timesteps above threshold), ``null_depth_matched`` (the fold's depth-matched null probability).
        base_rate: the binomial test's null success probability (the full probe's in-sample base prediction rate).
        criterion: ``"outcome"`` or ``"detection"``.
        level: confidence level of the one-sided interval.
        null_successes: LOOCV successes under each label permutation (empty: no permutation test was run).
        permutation_seed: seed of the permutations' generator.
    """

    folds: pd.DataFrame
    base_rate: float
    criterion: str = "outcome"
    level: float = 0.95
    null_successes: tuple[int, ...] = ()
    permutation_seed: int = 0
    label: ClassVar[str] = "app:halting_loocv"

    @property
    def successes(self) -> int:
        """Held-out MUST HALT questions correctly classified (29 in the paper)."""
        return int(self.folds["success"].sum())

    @property
    def n_folds(self) -> int:
        """Number of folds = MUST HALT questions (48 in the paper)."""
        return len(self.folds)

    @property
    def accuracy(self) -> float:
        """``successes / n_folds``."""
        return self.successes / self.n_folds if self.n_folds else 0.0

    @property
    def p_value(self) -> float:
        """The paper's one-sided exact binomial p-value against the in-sample base rate (= :attr:`p_binomial`)."""
        return float(binomial_test(self.successes, self.n_folds, self.base_rate, "greater").pvalue)

    @property
    def p_binomial(self) -> float:
        """The paper's binomial p-value (reproduces its reported numbers; not calibrated, see the module docstring)."""
        return self.p_value

    @property
    def n_permutations(self) -> int:
        """Label permutations behind :attr:`p_permutation` (0: not run)."""
        return len(self.null_successes)

    @property
    def p_permutation(self) -> float:
        """``(1 + #{null successes >= successes}) / (1 + permutations)``; NaN when no permutation was run."""
        if not self.null_successes:
            return float("nan")
        return permutation_p_value(self.successes, np.asarray(self.null_successes))

    @property
    def null_accuracy(self) -> float:
        """Mean held-out accuracy under the permutations (the out-of-sample null rate); NaN when not run."""
        if not self.null_successes or self.n_folds == 0:
            return float("nan")
        return float(np.mean(self.null_successes)) / self.n_folds

    @property
    def ci(self) -> tuple[float, float]:
        """One-sided Wilson interval ``(low, 1.0)`` on held-out accuracy at ``level``."""
        two_sided = wilson_interval(self.successes, self.n_folds, level=1 - 2 * (1 - self.level))
        return (float(two_sided.low), 1.0)

    @property
    def p_value_depth_matched(self) -> float:
        """``P(X >= successes)`` for X Poisson-binomial with the per-fold depth-matched null probabilities."""
        if "null_depth_matched" not in self.folds or self.n_folds == 0:
            return float("nan")
        probs = self.folds["null_depth_matched"].to_numpy(dtype=float)
        return float(poisson_binom.sf(self.successes - 1, probs))

    def table(self) -> pd.DataFrame:
        """One row: successes/folds, accuracy, base rate, both p-values, CI, depth-matched p, the permutation null."""
        low, high = self.ci
        return pd.DataFrame(
            [
                {
                    "loocv_correct": self.successes,
                    "folds": self.n_folds,
                    "accuracy": self.accuracy,
                    "base_rate": self.base_rate,
                    "p_value": self.p_value,
                    "p_binomial": self.p_binomial,
                    "p_permutation": self.p_permutation,
                    "permutations": self.n_permutations,
                    "null_accuracy": self.null_accuracy,
                    "ci_low": low,
                    "ci_high": high,
                    "criterion": self.criterion,
                    "p_value_depth_matched": self.p_value_depth_matched,
                }
            ]
        )


@dataclass(frozen=True)
class FoldPlan:
    """How every LOOCV fold's probe is trained and scored: the one parameter list of the observed folds
    (:func:`heldout_folds`) and of each permutation's (:func:`permutation_null`).

    Attributes:
        probe_config: architecture of every fold's probe.
        train_config: hyperparameters (None: the paper's).
        threshold: halting threshold.
        criterion: what counts as the held-out question being correctly classified (module docstring).
    """

    probe_config: ProbeConfig
    train_config: TrainConfig | None = None
    threshold: float = DEFAULT_THRESHOLD
    criterion: Criterion = "outcome"


def heldout_folds(data: ProbeData, plan: FoldPlan) -> pd.DataFrame:
    """The LOOCV folds alone: one fresh probe per held-out MUST HALT question, scored on that question.

    Returns one row per MUST HALT question: ``question_id``, ``success``, ``kind``, ``chosen_depth``,
    ``must_halt_detected`` (see :class:`LoocvResult`).
    """
    held_out = data.labels.must_halt_questions
    if len(held_out) < 2:
        raise UsageError(
            f"LOOCV needs at least 2 MUST HALT questions, the run has {len(held_out)}; record more questions"
        )
    groups, y = data.groups, data.y
    qpos = {q: i for i, q in enumerate(data.question_ids)}
    rows = []
    for q in held_out:
        keep = groups != q
        probe, _ = train_probe(data.x[keep], y[keep], plan.probe_config, plan.train_config)
        ev = evaluate_probe(probe, data, plan.threshold)
        mine = (groups == q) & y
        detected = bool((ev.detection.predicted[mine]).all())
        kind = str(ev.outcome.kind[qpos[q]])
        success = kind == "correct" if plan.criterion == "outcome" else detected
        rows.append({"question_id": q, "success": bool(success), "kind": kind,
                     "chosen_depth": int(ev.outcome.chosen_depth[qpos[q]]), "must_halt_detected": detected})
    return pd.DataFrame(rows)


def permutation_null(data: ProbeData, plan: FoldPlan, permutations: int = DEFAULT_PERMUTATIONS,
                     seed: int = 0) -> tuple[int, ...]:
    """LOOCV successes under ``permutations`` label permutations (:func:`~sst_interp.probe.permutation.permute_labels`).

    Each permutation reruns :func:`heldout_folds` in full, retraining every fold's probe as ``plan`` says.
    """
    if permutations < 0:
        raise UsageError(f"permutations must be >= 0, got {permutations}")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(permutations):
        folds = heldout_folds(permute_labels(data, rng), plan)
        out.append(int(folds["success"].sum()))
    return tuple(out)


def loocv(
    data: ProbeData,
    probe_config: ProbeConfig,
    train_config: TrainConfig | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    criterion: Criterion = "outcome",
    full_predicted: np.ndarray | None = None,
    permutations: int = 0,
    permutation_seed: int = 0,
) -> LoocvResult:
    """Leave-one-MUST-HALT-question-out cross-validation with the binomial and (optionally) permutation tests.

    Args:
        data: labels and states (``x: [n, d]``, ``eval_x: [Q, i_max, d]``).
        probe_config: architecture of every fold's probe.
        train_config: hyperparameters (default: the paper's).
        threshold: halting threshold.
        criterion: what counts as the held-out question being correctly classified (module docstring).
        full_predicted: ``[n_timesteps]`` bool, the predictions of a probe trained on every timestep
            (its mean is the base prediction rate); default: train that probe here.
        permutations: label permutations of the calibrated test (0: binomial only, as the paper; the report and
            CLI use :data:`DEFAULT_PERMUTATIONS`). Cost: ``(1 + permutations) x folds`` trainings.
        permutation_seed: seed of the permutations.

    Returns:
        :class:`LoocvResult`.
    """
    if criterion not in ("outcome", "detection"):
        raise UsageError(f"unknown LOOCV criterion {criterion!r}; use 'outcome' or 'detection'")
    data.labels.require_must_halt()
    train_config = train_config or TrainConfig()
    if full_predicted is None:
        full, _ = train_probe(data.x, data.y, probe_config, train_config)
        full_predicted = evaluate_probe(full, data, threshold).detection.predicted
    full_predicted = np.asarray(full_predicted, dtype=bool)
    if full_predicted.shape != data.y.shape:
        raise UsageError(f"full_predicted must have one entry per timestep ({len(data.y)}), got {full_predicted.shape}")
    plan = FoldPlan(probe_config, train_config, threshold, criterion)
    folds = heldout_folds(data, plan)
    depth = data.labels.timesteps["depth"].to_numpy()
    groups, y = data.groups, data.y
    # The depth-matched null of each fold: the full probe's in-sample rate at the held-out question's MUST HALT depths.
    folds["null_depth_matched"] = [
        float(full_predicted[np.isin(depth, np.unique(depth[(groups == q) & y]))].mean()) for q in folds["question_id"]
    ]
    null = permutation_null(data, plan, permutations, permutation_seed)
    return LoocvResult(folds, float(full_predicted.mean()), criterion, null_successes=null,
                       permutation_seed=permutation_seed)


@dataclass(frozen=True)
class CoverBound(AnalysisResult):
    """Cover's capacity bound on the probe's output layer (``sec:halting_probe_generalisation``).

    A linear classifier with bias on ``n_hidden`` inputs shatters at most ``n_hidden + 1`` points
    in general position (11 for the 10-neuron probe). Cover's function-counting theorem gives the
    number of linearly separable dichotomies of ``N`` points in general position,
    ``C(N, n + 1) = 2 * sum_{k=0}^{n} binom(N - 1, k)``, out of ``2^N``.

    Args:
        n_hidden: width of the output layer's input (the probe's bottleneck).
        n_points: points to separate (MUST HALT questions: 48 in the paper).
    """

    n_hidden: int
    n_points: int
    label: ClassVar[str] = "sec:halting_probe_generalisation"

    @property
    def shatter_capacity(self) -> int:
        """``n_hidden + 1`` (VC dimension of a biased linear classifier)."""
        return self.n_hidden + 1

    @property
    def ratio(self) -> float:
        """``n_points / shatter_capacity`` (48 / 11 = 4.4 in the paper)."""
        return self.n_points / self.shatter_capacity

    @property
    def separable_dichotomies(self) -> int:
        """Cover's ``C(N, n + 1)``, exact integer."""
        n, big_n = self.n_hidden, self.n_points
        return 2 * sum(math.comb(big_n - 1, k) for k in range(0, min(n, big_n - 1) + 1))

    @property
    def separable_fraction(self) -> float:
        """``C(N, n + 1) / 2^N``: chance a random labelling of the points is linearly separable."""
        return math.exp(math.log(self.separable_dichotomies) - self.n_points * math.log(2))

    def table(self) -> pd.DataFrame:
        """One row with the capacity, the ratio and the separable fraction."""
        return pd.DataFrame(
            [
                {
                    "n_hidden": self.n_hidden,
                    "shatter_capacity": self.shatter_capacity,
                    "n_points": self.n_points,
                    "ratio": self.ratio,
                    "separable_fraction": self.separable_fraction,
                }
            ]
        )


def cover_bound(n_hidden: int, n_points: int) -> CoverBound:
    """:class:`CoverBound` for a probe with ``n_hidden`` bottleneck units and ``n_points`` MUST HALT questions."""
    if n_hidden < 1 or n_points < 1:
        raise UsageError(f"Cover's bound needs n_hidden >= 1 and n_points >= 1, got {n_hidden}, {n_points}")
    return CoverBound(int(n_hidden), int(n_points))

