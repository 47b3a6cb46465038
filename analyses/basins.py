"""Basin shifts: the GMM threshold on top-k overlaps and what it classifies (paper sec:punctuated_equilibrium,
app:gmm).

- :func:`fit_gmm`: scikit-learn ``GaussianMixture`` (2 components, ``random_state=42``, ``max_iter=500``) on the
  overlap values; the threshold is the crossover, the overlap at which the stable component (highest mean) and
  the rest have equal posterior probability. :func:`gmm_robustness` refits with 2-5 components.
- :func:`classify_positions`: a (question, position) is *low-overlap* when its overlap is below the threshold at
  any layer (``rule="any"``, the default: the paper's low-overlap positions include ones whose deep layers stay
  above the threshold, and "rare occurrences barely cross the threshold"); ``"mean"`` and ``"median"`` over
  layers are available.
- :func:`basin_summary`: low-overlap positions per question, per-position rates, gaps between consecutive
  low-overlap positions and their coefficient of variation, and position-0 universality.
- :func:`position0_universality`: the iteration 1 vs 2 comparison at position 0 (mean and std over questions of
  the layer-mean overlap).

Layer profiles and heatmap data are in :mod:`sst_interp.analyses.basin_profiles`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from sst_interp.analyses import sections, tidy
from sst_interp.analyses.measurement import QUANTITY_DOC, Measurement, pe_part, quantities
from sst_interp.kernels.results import AnalysisResult, NotApplicable
from sst_interp.analyses.overlap import OverlapResult
from sst_interp.kernels.errors import UsageError

# scipy and scikit-learn are imported by the functions that use them, not by importing the module: the explorer's
# server imports classify_positions, and its memory stays within twice the run's tables (issue 45 item 8)
if TYPE_CHECKING:
    from sklearn.mixture import GaussianMixture

Rule = Literal["any", "mean", "median"]
GMM_SEED = 42
GMM_MAX_ITER = 500


# ---------------------------------------------------------------------------------------------- GMM
@dataclass(frozen=True)
class GMMFit(AnalysisResult):
    """A Gaussian mixture on overlap values, components sorted by mean, highest (stable) first.

    Args:
        n_components: number of components.
        means: [C] component means.
        stds: [C] component standard deviations.
        weights: [C] mixing weights.
        threshold: crossover overlap between the stable component and the rest.
        n: number of values fitted.
        converged: EM converged within max_iter.
    """

    n_components: int
    means: np.ndarray
    stds: np.ndarray
    weights: np.ndarray
    threshold: float
    n: int
    converged: bool
    label = "app:gmm"

    def table(self) -> pd.DataFrame:
        """Component, mean, std, weight (stable first); the threshold is in ``attrs['threshold']``."""
        names = ["Stable"] + (["Low-overlap"] if self.n_components == 2 else
                              [f"Low-overlap {i}" for i in range(1, self.n_components)])
        frame = pd.DataFrame({"component": names, "mean": self.means, "std": self.stds, "weight": self.weights})
        frame.attrs["threshold"] = self.threshold
        frame.attrs["n"] = self.n
        return frame


def _crossover(gmm: GaussianMixture, lo: float) -> float:
    means = gmm.means_.ravel()
    stable = int(np.argmax(means))
    top = float(means[stable])

    def posterior(x: np.ndarray) -> np.ndarray:
        return gmm.predict_proba(np.asarray(x, dtype=np.float64).reshape(-1, 1))[:, stable]

    grid = np.linspace(min(lo, top), top, 4001)
    below = np.flatnonzero(posterior(grid) < 0.5)
    if below.size == 0:  # the stable component wins everywhere in the data's range
        return float(grid[0])
    j = int(below[-1])
    if j == grid.size - 1:
        return top
    from scipy import optimize

    return float(optimize.brentq(lambda x: posterior(np.array([x]))[0] - 0.5, grid[j], grid[j + 1], xtol=1e-10))


def fit_gmm(overlaps: np.ndarray, n_components: int = 2, random_state: int = GMM_SEED,
            max_iter: int = GMM_MAX_ITER, max_samples: int | None = None) -> GMMFit | NotApplicable:
    """Fit the GMM of app:gmm to ``overlaps`` (any shape; NaNs dropped) and find the crossover threshold.

    ``max_samples`` fits a seeded random subsample when there are more values (for long-range sketch data);
    None fits all, as the paper does.
    """
    values = np.asarray(overlaps, dtype=np.float64).reshape(-1)
    values = values[~np.isnan(values)]
    if n_components < 2:
        raise UsageError(f"the basin GMM needs at least 2 components, got {n_components}")
    if np.unique(values).size < n_components:
        return NotApplicable(f"{np.unique(values).size} distinct overlap values cannot support a "
                             f"{n_components}-component mixture (no separate low-overlap regime)", "app:gmm")
    if max_samples is not None and values.size > max_samples:
        values = np.random.default_rng(random_state).choice(values, size=max_samples, replace=False)
    from sklearn.mixture import GaussianMixture

    gmm = GaussianMixture(n_components=n_components, random_state=random_state, max_iter=max_iter)
    gmm.fit(values.reshape(-1, 1))
    order = np.argsort(-gmm.means_.ravel())
    means = gmm.means_.ravel()[order]
    stds = np.sqrt(gmm.covariances_.reshape(n_components, -1)[:, 0])[order]
    weights = gmm.weights_[order]
    threshold = _crossover(gmm, float(values.min()))
    return GMMFit(n_components, means, stds, weights, threshold, int(values.size), bool(gmm.converged_))


@dataclass(frozen=True)
class GMMRobustness(AnalysisResult):
    """Crossover thresholds for several component counts (app:gmm, "Robustness to component count").

    Args:
        fits: the fits, in component order (NotApplicable where a count could not be fitted).
    """

    fits: tuple[GMMFit | NotApplicable, ...]
    label = "app:gmm/robustness"

    @property
    def max_shift(self) -> float:
        """Largest |threshold - threshold of the first (2-component) fit| over the fitted counts."""
        ok = [f for f in self.fits if isinstance(f, GMMFit)]
        return float(max(abs(f.threshold - ok[0].threshold) for f in ok)) if ok else 0.0

    def table(self) -> pd.DataFrame:
        """components, threshold, shift vs the first fit, stable mean/std/weight."""
        ok = [f for f in self.fits if isinstance(f, GMMFit)]
        base = ok[0].threshold
        return pd.DataFrame({
            "components": [f.n_components for f in ok],
            "threshold": [f.threshold for f in ok],
            "shift": [f.threshold - base for f in ok],
            "stable_mean": [float(f.means[0]) for f in ok],
            "stable_std": [float(f.stds[0]) for f in ok],
            "stable_weight": [float(f.weights[0]) for f in ok],
        })


def gmm_robustness(overlaps: np.ndarray, components: Sequence[int] = (2, 3, 4, 5), random_state: int = GMM_SEED,
                   max_iter: int = GMM_MAX_ITER, max_samples: int | None = None,
                   fitted: Sequence[GMMFit] = ()) -> GMMRobustness | NotApplicable:
    """Refit the GMM with each component count and compare the crossover thresholds (``fitted``: fits already
    made on the same values with the same settings, reused instead of refitting)."""
    known = {f.n_components: f for f in fitted}
    fits = tuple(known.get(c) or fit_gmm(overlaps, c, random_state, max_iter, max_samples) for c in components)
    if not any(isinstance(f, GMMFit) for f in fits):
        return NotApplicable(next(f.reason for f in fits if isinstance(f, NotApplicable)), "app:gmm/robustness")
    return GMMRobustness(fits)


# ---------------------------------------------------------------------------------------------- classification
def classify_positions(values: np.ndarray, threshold: float, rule: Rule = "any") -> np.ndarray:
    """Low-overlap flags ``[Q, P]`` from overlaps ``values: [Q, P, L]`` (NaN cells -> False).

    ``rule``: "any" (some layer below ``threshold``), "mean" or "median" over layers below it.
    """
    values = np.asarray(values, dtype=np.float64)
    missing = np.isnan(values).all(axis=-1)
    filled = np.where(np.isnan(values), np.inf, values)
    if rule == "any":
        low = (filled < threshold).any(axis=-1)
    elif rule in ("mean", "median"):
        agg = np.full(missing.shape, np.inf)
        rows = values[~missing]
        agg[~missing] = np.nanmean(rows, axis=-1) if rule == "mean" else np.nanmedian(rows, axis=-1)
        low = agg < threshold
    else:
        raise UsageError(f"unknown low-overlap rule {rule!r}; use any, mean or median")
    return low & ~missing


@dataclass(frozen=True)
class BasinSummary(AnalysisResult):
    """Where low-overlap positions fall (sec:punctuated_equilibrium, "Content-dependent distribution").

    Args:
        question_ids: [Q].
        positions: [P] positions.
        threshold: overlap threshold used.
        rule: position rule ("any", "mean", "median").
        low: [Q, P] low-overlap flags.
        valid: [Q, P] the question has that position.
        counts: [Q] low-overlap positions per question.
        rates: [P] fraction of questions (with that position) low there.
        gaps: pooled gaps between consecutive low-overlap positions of each question.
        gap_cv: coefficient of variation of ``gaps`` (scipy.stats.variation), None with fewer than 2 gaps.
        pos0_rate: fraction of questions low at position 0 (None when position 0 is absent).
    """

    question_ids: tuple[str, ...]
    positions: np.ndarray
    threshold: float
    rule: str
    low: np.ndarray
    valid: np.ndarray
    counts: np.ndarray
    rates: np.ndarray
    gaps: np.ndarray
    gap_cv: float | None
    pos0_rate: float | None
    label = "sec:punctuated_equilibrium"

    def low_positions(self, question_id: str) -> list[int]:
        """The low-overlap positions of one question."""
        row = self.question_ids.index(question_id)
        return self.positions[self.low[row]].tolist()

    def table(self) -> pd.DataFrame:
        """metric / value rows (counts per question, per-position rate range, gap range and CV, position 0)."""
        rows: list[tuple[str, float]] = [
            ("questions", float(len(self.question_ids))),
            ("threshold", self.threshold),
            ("low-overlap positions per question: min", float(self.counts.min())),
            ("low-overlap positions per question: median", float(np.median(self.counts))),
            ("low-overlap positions per question: max", float(self.counts.max())),
            ("per-position rate: min", float(self.rates.min())),
            ("per-position rate: max", float(self.rates.max())),
        ]
        if self.gaps.size:
            rows += [("gap between consecutive low-overlap positions: min", float(self.gaps.min())),
                     ("gap between consecutive low-overlap positions: max", float(self.gaps.max()))]
        if self.gap_cv is not None:
            rows.append(("gap coefficient of variation", self.gap_cv))
        if self.pos0_rate is not None:
            rows.append(("position 0 low-overlap rate", self.pos0_rate))
        return pd.DataFrame(rows, columns=["metric", "value"])

    def position_table(self) -> pd.DataFrame:
        """position, questions with it, low-overlap count and rate."""
        return pd.DataFrame({"position": self.positions, "n_questions": self.valid.sum(axis=0),
                             "n_low": self.low.sum(axis=0), "rate": self.rates})


def basin_summary(overlap: OverlapResult, threshold: float, rule: Rule = "any") -> BasinSummary | NotApplicable:
    """Low-overlap positions of every question in ``overlap`` at ``threshold``."""
    low = classify_positions(overlap.values, threshold, rule)
    valid = overlap.valid
    if not low.any():
        return NotApplicable(f"no position is low-overlap at threshold {threshold:.4f}", "sec:punctuated_equilibrium")
    counts = low.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rates = np.where(valid.sum(axis=0) > 0, low.sum(axis=0) / np.maximum(valid.sum(axis=0), 1), 0.0)
    gaps = np.concatenate([np.diff(overlap.positions[row]) for row in low]).astype(np.int64) \
        if len(low) else np.zeros(0, np.int64)
    if gaps.size >= 2 and gaps.mean() > 0:
        from scipy import stats

        gap_cv = float(stats.variation(gaps))
    else:
        gap_cv = None
    at0 = np.flatnonzero(overlap.positions == 0)
    pos0 = float(low[valid[:, at0[0]], at0[0]].mean()) if at0.size and valid[:, at0[0]].any() else None
    return BasinSummary(overlap.question_ids, overlap.positions, float(threshold), rule, low, valid, counts, rates,
                        gaps, gap_cv, pos0)


@dataclass(frozen=True)
class Position0Shift(AnalysisResult):
    """Universal basin shift at position 0 (iteration 1 vs 2): per-question layer-mean overlaps.

    Args:
        comparison: the compared iterations/runs.
        n_questions: questions with position 0.
        n_low: questions low-overlap at position 0.
        mean: mean over questions of the layer-mean overlap.
        std: its sample standard deviation (ddof=1; 0 for one question).
        per_question: [Q] layer-mean overlaps.
    """

    comparison: str
    n_questions: int
    n_low: int
    mean: float
    std: float
    per_question: np.ndarray
    label = "sec:punctuated_equilibrium/pos0"

    def table(self) -> pd.DataFrame:
        """One row: comparison, N, low count, mean, std."""
        return pd.DataFrame([{"comparison": self.comparison, "n_questions": self.n_questions, "n_low": self.n_low,
                              "mean_overlap": self.mean, "std_overlap": self.std}])


def position0_universality(overlap: OverlapResult, threshold: float, rule: Rule = "any"
                           ) -> Position0Shift | NotApplicable:
    """Position-0 shift from an iteration-1 vs iteration-2 overlap (cross-run depth 1 vs 2, or within-run)."""
    at0 = np.flatnonzero(overlap.positions == 0)
    if at0.size == 0:
        return NotApplicable("position 0 is not in the overlap data", "sec:punctuated_equilibrium/pos0")
    values = overlap.values[:, at0[0]]  # [Q, L]
    keep = ~np.isnan(values).all(axis=1)
    if not keep.any():
        return NotApplicable("no question has position 0", "sec:punctuated_equilibrium/pos0")
    values = values[keep]
    per_q = np.nanmean(values, axis=1)
    low = classify_positions(values[:, None, :], threshold, rule)[:, 0]
    std = float(np.std(per_q, ddof=1)) if per_q.size > 1 else 0.0
    return Position0Shift(overlap.comparison, int(per_q.size), int(low.sum()), float(per_q.mean()), std, per_q)


# ------------------------------------------------------------------------------------------------ entries
# sec:punctuated_equilibrium, app:gmm: parts of the run's basin step (a.punctuated).
def _gmm_table(result: Any) -> pd.DataFrame:
    frame = result.table().copy()
    frame.attrs = {}  # the threshold and n go in the notes
    return frame


def _gmm_notes(a: Any, result: Any) -> list[str]:
    pe = a.punctuated
    return [f"crossover threshold: {result.threshold:.4f}", f"overlap values fitted: {result.n}",
            f"comparison: {getattr(pe.overlap, 'comparison', '')}", f"EM converged: {result.converged}"]


MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(name="gmm", label="", title="Two-component Gaussian mixture on the overlaps and its crossover "
                "threshold (app:gmm).", requires=("iterations",), compute=pe_part("gmm"),
                tidy=lambda r: tidy.renamed(_gmm_table(r), {}),
                columns={"component": "Stable or Low-overlap", "mean": "mean overlap", "std": "standard deviation",
                         "weight": "mixture weight"}, notes=_gmm_notes, presentation=_gmm_table,
                family=sections.BASIN_SHIFTS, caption="Two-component Gaussian mixture on the iter-1 vs iter-N "
                "overlaps: stable and low-overlap components and their crossover threshold (app:gmm)."),
    Measurement(name="gmm_robustness", label="", title="Crossover thresholds of 2- to 5-component mixtures (app:gmm).",
                requires=("iterations",), compute=pe_part("robustness"), tidy=lambda r: tidy.renamed(r.table(), {}),
                columns={"components": "mixture components", "threshold": "crossover", "shift": "from the 2-component "
                         "threshold", "stable_mean": "stable component mean", "stable_std": "its std",
                         "stable_weight": "its weight"},
                notes=lambda a, r: [f"largest threshold shift from the 2-component fit: {r.max_shift:.4f}"],
                family=sections.BASIN_SHIFTS, caption="Crossover threshold of 2- to 5-component mixtures (app:gmm "
                "robustness)."),
    Measurement(name="basin_summary", label="", title="Low-overlap positions per question, per-position rates, gaps "
                "(sec:punctuated_equilibrium).", requires=("iterations",), compute=pe_part("summary"),
                tidy=quantities("metric"), columns=QUANTITY_DOC, family=sections.BASIN_SHIFTS, caption="Low-overlap "
                "positions per question, per-position rates, gaps between consecutive low-overlap positions and their "
                "coefficient of variation (sec:punctuated_equilibrium)."),
    Measurement(name="basin_position_rates", label="", title="Fraction of questions low-overlap at each window "
                "position.", requires=("iterations",), compute=pe_part("summary"),
                tidy=lambda r: tidy.renamed(r.position_table(), {}),
                columns={"position": "generated position", "n_questions": "questions", "n_low": "low-overlap there",
                         "rate": "fraction"}, notes=lambda a, r: [f"threshold {r.threshold:.4f}, rule '{r.rule}'"],
                presentation=lambda r: r.position_table(), family=sections.BASIN_SHIFTS, caption="Fraction of "
                "questions with a low-overlap (basin-shift) position at each window position."),
    Measurement(name="pos0_universality", label="", title="Position 0, iteration 1 vs 2: the universal basin shift.",
                requires=("iterations",), compute=pe_part("pos0"), tidy=lambda r: tidy.renamed(r.table(), {}),
                columns={"comparison": "what is compared", "n_questions": "questions", "n_low": "low-overlap",
                         "mean_overlap": "mean layer-mean overlap", "std_overlap": "its std"},
                family=sections.BASIN_SHIFTS, caption="Position 0, iteration 1 vs 2: mean and std over questions of "
                "the layer-mean overlap and how many questions are low-overlap there."),
)
