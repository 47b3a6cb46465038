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
(:mod:`~sst_interp.probe.permutation`): the same LOOCV, every fold's probe retrained, on labellings drawn within
equal-correct-depth strata. The binomial p (``p_binomial``, also ``p_value``) stays to reproduce the paper's numbers
from its counts; report both, and read significance from ``p_permutation``.

The permutations are spent where they can change the answer (issue 58):

- **before anything is trained**, the labellings the strata allow are counted
  (:func:`~sst_interp.probe.permutation.label_arrangements`); with fewer than ``1 / alpha`` no permutation test can
  reach p <= alpha, so none is drawn: ``p_permutation`` is 1 (the p of a test settled before its first draw), and
  ``permutation_stop`` says why;
- otherwise they are drawn one at a time under a sequential plan (:mod:`~sst_interp.probe.sequential`, Besag and
  Clifford 1991) of at most ``permutations`` draws: it stops when enough permuted LOOCVs have done as well as the
  observed one that the fixed test could no longer be significant at ``alpha`` (p = h / draws), or when it would be
  significant whatever the draws left. ``permutations`` in the table is the number drawn, ``permutation_stop`` why it
  stopped. The same calibration as the fixed test: no decision at ``alpha`` differs when ``alpha (permutations + 1)``
  is a whole number (the default 99 at 0.05), and the p is valid at every level.

Cost: ``(1 + drawn) x folds`` probe trainings; at most ``(1 + permutations) x folds`` (the paper's data: 100 x 48).
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
from sst_interp.probe.defaults import DEFAULT_ALPHA, DEFAULT_PERMUTATIONS
from sst_interp.probe.evaluate import evaluate_probe
from sst_interp.probe.model import DEFAULT_THRESHOLD, ProbeConfig
from sst_interp.probe.permutation import label_arrangements, permute_labels
from sst_interp.probe.sequential import SequentialPlan, SequentialTest, run_sequential
from sst_interp.probe.train import TrainConfig, train_probe

Criterion = Literal["outcome", "detection"]
#: how :attr:`LoocvResult.permutation_note` starts when the strata make the level unreachable
SKIPPED = "skipped before training"



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
        permutation: the sequential label-permutation test as run (None: no permutation was drawn).
        permutation_seed: seed of the permutations' generator.
        label_arrangements: the labellings the permutation strata allow (0: not counted).
        permutation_note: why no permutation was drawn ("" when one was).
    """

    folds: pd.DataFrame
    base_rate: float
    criterion: str = "outcome"
    level: float = 0.95
    permutation: SequentialTest | None = None
    permutation_seed: int = 0
    label_arrangements: int = 0
    permutation_note: str = ""
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
    def null_successes(self) -> tuple[int, ...]:
        """LOOCV successes under each label permutation drawn, in order (empty: none drawn)."""
        return tuple(int(v) for v in self.permutation.null) if self.permutation else ()

    @property
    def n_permutations(self) -> int:
        """Label permutations drawn behind :attr:`p_permutation` (0: none)."""
        return len(self.null_successes)

    @property
    def p_permutation(self) -> float:
        """The sequential permutation p (:mod:`~sst_interp.probe.sequential`); 1 when the strata allow too few
        labellings to reach the level (nothing drawn); NaN when no permutation test was asked for."""
        if self.permutation is not None:
            return self.permutation.p
        return 1.0 if self.permutation_note.startswith(SKIPPED) else float("nan")

    @property
    def arrangements_float(self) -> float:
        """:attr:`label_arrangements` as a float for the table (inf beyond float range: 240 questions in one stratum
        can allow more than 10^308 labellings)."""
        return float(self.label_arrangements) if self.label_arrangements < 10 ** 308 else math.inf

    @property
    def permutation_stop(self) -> str:
        """Why the permutations stopped, or why none was drawn."""
        return self.permutation.stop if self.permutation is not None else self.permutation_note

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
        """One row: successes/folds, accuracy, base rate, both p-values, the permutations drawn and why they stopped,
        the labellings the strata allow, CI, depth-matched p, the permutation null."""
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
                    "permutation_stop": self.permutation_stop,
                    "label_arrangements": self.arrangements_float,
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
    (:func:`heldout_folds`) and of each permutation's (:func:`permutation_test`).

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


def permutation_test(data: ProbeData, plan: FoldPlan, observed: int, sequential: SequentialPlan,
                     seed: int = 0) -> SequentialTest:
    """The sequential label-permutation test of ``observed`` LOOCV successes: each draw reruns :func:`heldout_folds`
    in full on one permutation (:func:`~sst_interp.probe.permutation.permute_labels`), retraining every fold's probe
    as ``plan`` says, until ``sequential`` settles the answer (:func:`~sst_interp.probe.sequential.run_sequential`)."""
    rng = np.random.default_rng(seed)

    def draw() -> float:
        return float(heldout_folds(permute_labels(data, rng), plan)["success"].sum())

    return run_sequential(float(observed), draw, sequential)


def unreachable(arrangements: int, alpha: float) -> str:
    """Why a permutation test of data whose strata allow ``arrangements`` labellings cannot reach p <= ``alpha``,
    or "" when it can (its smallest exact p is ``1 / arrangements``)."""
    if arrangements >= 1 / alpha:  # compared as int and float: the count can be far beyond float range
        return ""
    need = math.ceil(1 / alpha)
    what = ("every correct-depth stratum holds only MUST HALT or only SAFE questions: nothing to permute"
            if arrangements == 1 else f"the strata allow {arrangements} labellings")
    return (f"{SKIPPED}: {what}, so the smallest p any permutation test can give is 1/{arrangements} = "
            f"{1 / arrangements:.3g} > {alpha:g}; reaching it needs at least {need} labellings (more MUST HALT and "
            f"SAFE questions at the same correct depth)")


def loocv(
    data: ProbeData,
    probe_config: ProbeConfig,
    train_config: TrainConfig | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    criterion: Criterion = "outcome",
    full_predicted: np.ndarray | None = None,
    permutations: int = 0,
    permutation_seed: int = 0,
    permutation_alpha: float = DEFAULT_ALPHA,
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
        permutations: the most label permutations the calibrated test draws (0: binomial only, as the paper; the
            report and CLI use :data:`DEFAULT_PERMUTATIONS`). Cost: at most ``(1 + permutations) x folds`` trainings.
        permutation_seed: seed of the permutations.
        permutation_alpha: the level the sequential test settles its answer at (module docstring; a smaller one
            draws longer on a strong effect and gives it a finer p).

    Returns:
        :class:`LoocvResult`.
    """
    if criterion not in ("outcome", "detection"):
        raise UsageError(f"unknown LOOCV criterion {criterion!r}; use 'outcome' or 'detection'")
    if permutations < 0:
        raise UsageError(f"permutations must be >= 0, got {permutations}")
    data.labels.require_must_halt()
    # the power check, before anything is trained: can any permutation test of these strata reach the level?
    sequential = SequentialPlan(permutations, permutation_alpha) if permutations else None
    arrangements = label_arrangements(data)
    note = unreachable(arrangements, permutation_alpha) if permutations else (
        "not run (permutations = 0: the paper's binomial test only)")
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
    test = None
    if sequential is not None and not note:
        test = permutation_test(data, plan, int(folds["success"].sum()), sequential, permutation_seed)
    return LoocvResult(folds, float(full_predicted.mean()), criterion, permutation=test,
                       permutation_seed=permutation_seed, label_arrangements=arrangements, permutation_note=note)


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

