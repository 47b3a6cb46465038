"""First argmax divergence between iteration-depth runs, pre-divergence positions, tab:causal_ordering and
tab:pos0_divergence (paper sec:punctuated_equilibrium, sec:logit_dynamics (4) and (7)).

Under greedy decoding the token a run emits at position p is the argmax of its last iteration there, so the first
argmax disagreement between two runs is the first position where their generated ``token_ids`` differ (when one
trace is a strict prefix of the other, the shorter length). ``-1`` means "never" (identical traces).

Pre-divergence positions of a question are the positions p <= its first divergence over *all* pairs of depths:
the token history is identical up to and including p (the divergent token is emitted at p itself, so an argmax
change there is still attributable to the state stream alone). Per pair, the clean range is p <= that pair's
first divergence. The observation window is the run's ``full_positions`` (10 in the paper).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from sst_interp.analyses import sections, tidy
from sst_interp.analyses.measurement import Measurement, pe_part
from sst_interp.kernels.results import AnalysisResult, NotApplicable, single_depth
from sst_interp.kernels.outcomes import NEVER, first_divergence

if TYPE_CHECKING:
    from sst_interp.store import Run


# ---------------------------------------------------------------------------------------------- array level
def first_divergence_any(traces: Sequence[Sequence[int] | np.ndarray]) -> int:
    """First position where not every trace agrees (the minimum over all pairs); -1 if all are identical."""
    firsts = [first_divergence(a, b) for a, b in combinations(traces, 2)]
    firsts = [f for f in firsts if f != NEVER]
    return min(firsts) if firsts else NEVER


def pre_divergence_mask(first: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """[Q, P] bool: position <= first divergence (every position when it is -1).

    ``first: [Q]`` int first divergences; ``positions: [P]`` generated positions.
    """
    first = np.asarray(first, dtype=np.int64)
    bound = np.where(first == NEVER, np.iinfo(np.int64).max, first)
    return np.asarray(positions)[None, :] <= bound[:, None]


def first_true(mask: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """[Q] the first position where ``mask: [Q, P]`` is True (positions ascending), -1 where none."""
    mask = np.asarray(mask, dtype=bool)
    has = mask.any(axis=1)
    return np.where(has, np.asarray(positions)[mask.argmax(axis=1)], NEVER).astype(np.int64)


# ---------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class DivergenceResult(AnalysisResult):
    """First divergence of every pair of depths, per question.

    Args:
        question_ids: [Q] ids (complete at every compared depth).
        depths: the compared depths.
        pairs: the (depth_a, depth_b) pairs, a < b.
        first: [Q, n_pairs] int64 first divergence per pair (-1 identical traces).
        first_any: [Q] int64 first divergence over all pairs (-1 all identical).
        window: the observation window (positions with full hidden states).
    """

    question_ids: tuple[str, ...]
    depths: tuple[int, ...]
    pairs: tuple[tuple[int, int], ...]
    first: np.ndarray
    first_any: np.ndarray
    window: int
    label = "divergence"

    def pair(self, depth_a: int, depth_b: int) -> np.ndarray:
        """[Q] first divergence of one pair of depths."""
        key = (min(depth_a, depth_b), max(depth_a, depth_b))
        return self.first[:, self.pairs.index(key)]

    def pre_divergence(self, positions: np.ndarray | None = None) -> np.ndarray:
        """[Q, P] bool pre-divergence mask over ``positions`` (default: the window 0..window-1)."""
        positions = np.arange(self.window) if positions is None else np.asarray(positions)
        return pre_divergence_mask(self.first_any, positions)

    def outcome(self) -> np.ndarray:
        """[Q] "at 0" / "in window" / "beyond window" / "never" for the first divergence over all pairs."""
        f = self.first_any
        return np.where(f == NEVER, "never", np.where(f == 0, "at 0", np.where(f < self.window, "in window",
                                                                               "beyond window")))

    def table(self) -> pd.DataFrame:
        """One row per question: first divergence per pair, over all pairs, and the pre-divergence count."""
        frame = pd.DataFrame({"question_id": list(self.question_ids)})
        for j, (a, b) in enumerate(self.pairs):
            frame[f"first_{a}v{b}"] = self.first[:, j]
        frame["first_any"] = self.first_any
        frame["pre_divergence_positions"] = self.pre_divergence().sum(axis=1)
        frame["outcome"] = self.outcome()
        return frame


@dataclass(frozen=True)
class CausalOrdering(AnalysisResult):
    """tab:causal_ordering: does low overlap precede or coincide with the first argmax divergence?

    Args:
        question_ids: [Q].
        first_low: [Q] first low-overlap position in the window (-1 none).
        first_div: [Q] first divergence over all pairs (-1 never).
        window: observation window.
        group: [Q] "simultaneous" / "precedes" / "beyond window" / "exception" / "neither".
    """

    question_ids: tuple[str, ...]
    first_low: np.ndarray
    first_div: np.ndarray
    window: int
    group: np.ndarray
    label = "tab:causal_ordering"

    def count(self, group: str) -> int:
        """Questions in one group."""
        return int((self.group == group).sum())

    @property
    def late_confirmed(self) -> int:
        """Beyond-window questions whose full traces do differ (divergence later, not never)."""
        late = self.group == "beyond window"
        return int((late & (self.first_div != NEVER)).sum())

    def table(self) -> pd.DataFrame:
        """Rows as the paper's table: group, N, percent of questions."""
        n = len(self.question_ids)
        w = self.window
        rows = [
            ("Simultaneous (low overlap + argmax flip at the same position)", self.count("simultaneous")),
            (f"Low overlap precedes argmax flip (1-{max(w - 1, 1)} positions earlier)", self.count("precedes")),
            ("Low overlap in window, divergence beyond window", self.count("beyond window")),
            ("Exceptions (argmax flip before low overlap)", self.count("exception")),
            ("Neither low overlap nor divergence in window", self.count("neither")),
        ]
        frame = pd.DataFrame(rows, columns=["group", "n"])
        frame["percent"] = 100.0 * frame["n"] / n
        frame.attrs["exceptions"] = f"{self.count('exception')}/{n}"
        frame.attrs["late_confirmed"] = f"{self.late_confirmed}/{self.count('beyond window')}"
        frame.attrs["simultaneous_at_position_0"] = int(((self.group == "simultaneous") & (self.first_div == 0)).sum())
        return frame


@dataclass(frozen=True)
class Pos0Divergence(AnalysisResult):
    """tab:pos0_divergence: downstream outcomes of the questions with a basin shift at position 0.

    Args:
        n_questions: all questions compared.
        n_pos0_shift: questions with low overlap at position 0 (the table's population).
        at_0, in_window, beyond_window: outcomes among them (beyond includes never).
        late_confirmed: beyond-window questions whose full traces differ.
        window: observation window.
    """

    n_questions: int
    n_pos0_shift: int
    at_0: int
    in_window: int
    beyond_window: int
    late_confirmed: int
    window: int
    label = "tab:pos0_divergence"

    def table(self) -> pd.DataFrame:
        """Outcome, N, percent of the position-0 basin-shift questions."""
        n = self.n_pos0_shift
        rows = [("Diverge at position 0", self.at_0),
                (f"Diverge at positions 1-{self.window - 1}", self.in_window),
                (f"Diverge beyond {self.window}-position window", self.beyond_window)]
        frame = pd.DataFrame(rows, columns=["outcome", "n"])
        frame["percent"] = 100.0 * frame["n"] / n
        frame.attrs["basin_shift_at_position_0"] = f"{self.n_pos0_shift}/{self.n_questions}"
        frame.attrs["late_confirmed"] = f"{self.late_confirmed}/{self.beyond_window}"
        return frame


# ---------------------------------------------------------------------------------------------- functions
def divergence_from_traces(traces: dict[int, Sequence[Sequence[int]]], question_ids: Sequence[str], window: int
                           ) -> DivergenceResult | NotApplicable:
    """First divergences from token traces: ``traces[depth][q]`` is question q's generated tokens at that depth."""
    depths = tuple(sorted(traces))
    refused = single_depth(depths, "divergence", "divergence needs two or more")
    if refused is not None:
        return refused
    pairs = tuple(combinations(depths, 2))
    first = np.array([[first_divergence(traces[a][q], traces[b][q]) for a, b in pairs]
                      for q in range(len(question_ids))], dtype=np.int64).reshape(len(question_ids), len(pairs))
    first_any = np.array([min((f for f in row if f != NEVER), default=NEVER) for row in first], dtype=np.int64)
    return DivergenceResult(tuple(question_ids), depths, pairs, first, first_any, int(window))


def divergence(run: Run, depths: Sequence[int] | None = None, turn: int = 0, window: int | None = None
               ) -> DivergenceResult | NotApplicable:
    """First divergences of a run's depths from generations.parquet (questions complete at every depth)."""
    depths = list(run.depths if depths is None else depths)
    refused = single_depth(depths, "divergence", "divergence needs two or more")
    if refused is not None:
        return refused
    gens = run.generations()
    gens = gens[gens["turn"] == turn]
    sets = [set(run.question_ids(d)) for d in depths]
    ids = [q for q in run.question_ids(depths[0]) if all(q in s for s in sets)]
    if not ids:
        return NotApplicable(f"no question is complete at every depth {depths}", "divergence")
    by_key = {(q, int(d)): t for q, d, t in zip(gens["question_id"], gens["depth"], gens["token_ids"])}
    missing = [(q, d) for q in ids for d in depths if (q, d) not in by_key]
    if missing:
        return NotApplicable(f"generations lack turn {turn} for {missing[:3]}", "divergence")
    traces = {d: [np.asarray(by_key[(q, d)]) for q in ids] for d in depths}
    window = int(run.manifest.get("full_positions") or 0) if window is None else int(window)
    return divergence_from_traces(traces, ids, window)


def causal_ordering(first_low: np.ndarray, first_div: np.ndarray, window: int,
                    question_ids: Sequence[str] | None = None) -> CausalOrdering | NotApplicable:
    """Classify each question by the order of its first low-overlap position and first divergence.

    ``first_low: [Q]`` first low-overlap position inside the window (-1 none); ``first_div: [Q]`` first divergence
    over all pairs (-1 never). Groups: simultaneous (equal, inside the window), precedes (low overlap earlier,
    divergence inside the window), beyond window (low overlap in the window, divergence at or after ``window`` or
    never), exception (divergence inside the window before any low overlap), neither.
    """
    low = np.asarray(first_low, dtype=np.int64)
    div = np.asarray(first_div, dtype=np.int64)
    if low.size == 0:
        return NotApplicable("no questions to order", "tab:causal_ordering")
    has_low = low != NEVER
    div_in = (div != NEVER) & (div < window)
    group = np.full(low.shape, "neither", dtype=object)
    group[has_low & div_in & (low == div)] = "simultaneous"
    group[has_low & div_in & (low < div)] = "precedes"
    group[has_low & ~div_in] = "beyond window"
    group[div_in & (~has_low | (div < low))] = "exception"
    ids = tuple(question_ids) if question_ids is not None else tuple(str(i) for i in range(low.size))
    return CausalOrdering(ids, low, div, int(window), group.astype(str))


def pos0_divergence(low_at_0: np.ndarray, first_div: np.ndarray, window: int) -> Pos0Divergence | NotApplicable:
    """tab:pos0_divergence from ``low_at_0: [Q]`` bool (basin shift at position 0) and ``first_div: [Q]``."""
    low0 = np.asarray(low_at_0, dtype=bool)
    div = np.asarray(first_div, dtype=np.int64)
    if not low0.any():
        return NotApplicable("no question shows a basin shift (low overlap) at position 0", "tab:pos0_divergence")
    d = div[low0]
    at_0 = int((d == 0).sum())
    in_window = int(((d > 0) & (d < window)).sum())
    beyond = int(((d == NEVER) | (d >= window)).sum())
    late_confirmed = int((d >= window).sum())
    return Pos0Divergence(int(low0.size), int(low0.sum()), at_0, in_window, beyond, late_confirmed, int(window))


# ------------------------------------------------------------------------------------------------ entries
# Parts of the run's basin step (a.punctuated).
MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(name="causal_ordering", label="tab:causal_ordering", title="First low-overlap position vs first argmax "
                "divergence.", requires=("iterations",), compute=pe_part("causal"),
                tidy=lambda r: tidy.categories(r.table(), "group", {"n": "n_questions", "percent": "percent"}),
                columns={"category": "ordering key", "category_text": "the paper's row", "n_questions": "questions",
                         "percent": "percent of questions"}, family=sections.LOGIT_DYNAMICS, caption="Order of the "
                "first low-overlap position and the first argmax divergence between depths, per question."),
    Measurement(name="pos0_divergence", label="tab:pos0_divergence", title="Outcome of the questions with a basin "
                "shift at position 0.", requires=("iterations",), compute=pe_part("pos0_divergence"),
                tidy=lambda r: tidy.categories(r.table(), "outcome", {"n": "n_questions", "percent": "percent"}),
                columns={"category": "outcome key", "category_text": "the paper's row", "n_questions": "questions",
                         "percent": "percent of questions"}, family=sections.LOGIT_DYNAMICS, caption="Downstream "
                "outcome of the questions with a basin shift at position 0: diverge at 0, inside the window, or beyond "
                "it."),
)
