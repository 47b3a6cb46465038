"""Cross-family measurements: the same quantity read from runs of different latent-iteration families, in one tidy
table per measurement so that a report puts them side by side (docs/families.md).

Each function reads one :class:`~sst_interp.store.Run` of any family (SST when the manifest names none) through
the family's loop declaration as written in the manifest (``loop.state_layer``; SST's last stateful layer):

- :func:`state_profile`: per iteration transition i-1 -> i of the deepest depth, the mean top-k |value| overlap and
  the mean relative L2 change of the carried loop state, over every full position;
- :func:`capacity_profile`: per recorded depth, the accuracy at that depth and the staged capacity (a question
  counts once it was correct at any depth <= D);
- :func:`convergence_profile`: how fast the carried state settles (the state profile's first and last transitions),
  one row per run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.analyses import sections, tidy
from sst_interp.analyses.figure_data import FigureData
from sst_interp.analyses.measurement import Frame, Measurement, by_computing, figure_main
from sst_interp.analyses.loop_manifest import state_layer
from sst_interp.kernels.results import NotApplicable

STATE_COLUMNS = ("run", "family", "iteration", "overlap", "relative_change", "n_positions")
CAPACITY_COLUMNS = ("run", "family", "depth", "accuracy_pct", "staged_capacity_pct", "n_questions")
CONVERGENCE_COLUMNS = ("run", "family", "depth", "first_change", "last_change", "last_over_first",
                       "half_change_iteration", "first_overlap", "last_overlap", "n_positions")


def family_of(run: Any) -> str:
    """The run's family name (``sst`` when the manifest names none)."""
    return str(run.manifest.get("family") or "sst")


def state_profile(run: Any, name: str) -> pd.DataFrame | NotApplicable:
    """Top-k overlap and relative L2 change of the carried state between consecutive iterations.

    Args:
        run: a fixed-depth run with full hidden states.
        name: the run's label in the table.

    Returns:
        rows ``run, family, iteration (i >= 2: the transition i-1 -> i), overlap (|top-k(i-1) & top-k(i)| / k,
        k = the manifest's sketch_k), relative_change (||s_i - s_{i-1}|| / ||s_{i-1}||), n_positions``, means over
        every question's recorded full positions at the deepest depth; ``NotApplicable`` when the run has no depth
        >= 2 or no hidden states.
    """
    depth = max(run.depths, default=0)
    if depth < 2:
        return NotApplicable(f"run has depths {run.depths}; a state profile needs a depth >= 2", "fig_family_state")
    if int(run.manifest.get("full_positions") or 0) < 1:
        return NotApplicable("the run recorded no hidden states (full_positions 0)", "fig_family_state")
    layer = state_layer(run.manifest, run.num_layers)
    k = max(1, int(run.manifest.get("sketch_k") or 1))
    overlap: list[list[float]] = [[] for _ in range(depth - 1)]
    change: list[list[float]] = [[] for _ in range(depth - 1)]
    for block in run.hidden(depth, layers=[layer]):
        values = block.values[:, :, 0].astype(np.float64)  # [positions, iterations, d]
        if values.shape[1] != depth:
            continue  # the state layer was not visited at every iteration
        for states in values:
            if np.isnan(states).any():
                continue
            top = np.argsort(-np.abs(states), axis=-1)[:, :k]
            for i in range(1, depth):
                overlap[i - 1].append(len(set(top[i - 1]) & set(top[i])) / k)
                base = float(np.linalg.norm(states[i - 1]))
                change[i - 1].append(float(np.linalg.norm(states[i] - states[i - 1])) / base if base else np.nan)
    if not overlap[0]:
        return NotApplicable(f"no position holds the state layer ({layer}) at every iteration of depth {depth}",
                             "fig_family_state")
    rows = [{"run": name, "family": family_of(run), "iteration": i + 1, "overlap": float(np.mean(overlap[i - 1])),
             "relative_change": float(np.nanmean(change[i - 1])), "n_positions": len(overlap[i - 1])}
            for i in range(1, depth)]
    return pd.DataFrame(rows, columns=list(STATE_COLUMNS))


def capacity_profile(run: Any, name: str) -> pd.DataFrame | NotApplicable:
    """Accuracy and staged capacity per recorded depth.

    Returns:
        rows ``run, family, depth, accuracy_pct, staged_capacity_pct, n_questions`` over the questions recorded at
        every depth; ``NotApplicable`` without two depths.
    """
    if len(run.depths) < 2:
        return NotApplicable(f"run has a single depth ({run.depths}); staged capacity needs two or more",
                             "fig_family_capacity")
    episodes = run.episodes()
    table = episodes.pivot_table(index="question_id", columns="depth", values="correct", aggfunc="first")
    table = table.dropna()
    if table.empty:
        return NotApplicable("no question is recorded at every depth", "fig_family_capacity")
    correct = table.astype(bool)
    depths = sorted(int(d) for d in correct.columns)
    rows = []
    for depth in depths:
        upto = correct[[d for d in correct.columns if int(d) <= depth]].any(axis=1)
        rows.append({"run": name, "family": family_of(run), "depth": depth,
                     "accuracy_pct": 100.0 * float(correct[depth].mean()),
                     "staged_capacity_pct": 100.0 * float(upto.mean()), "n_questions": len(correct)})
    return pd.DataFrame(rows, columns=list(CAPACITY_COLUMNS))


def convergence_profile(run: Any, name: str) -> pd.DataFrame | NotApplicable:
    """How fast the carried state settles, read from :func:`state_profile` (one row per run).

    Returns:
        one row ``run, family, depth, first_change (relative change of the transition 1 -> 2), last_change (of
        the transition depth-1 -> depth), last_over_first, half_change_iteration (the first iteration i >= 3 whose
        transition i-1 -> i changes the state by at most half the first transition's change; NaN when none does),
        first_overlap, last_overlap, n_positions``; ``NotApplicable`` when the run has no state profile.
    """
    profile = state_profile(run, name)
    if isinstance(profile, NotApplicable):
        return NotApplicable(profile.reason, "tab_family_convergence")
    change = profile["relative_change"].to_numpy(dtype=np.float64)
    iterations = profile["iteration"].to_numpy()
    halved = [int(i) for i, c in zip(iterations[1:], change[1:]) if c <= change[0] / 2]
    row = {"run": name, "family": family_of(run), "depth": int(iterations[-1]), "first_change": float(change[0]),
           "last_change": float(change[-1]),
           "last_over_first": float(change[-1] / change[0]) if change[0] else np.nan,
           "half_change_iteration": float(halved[0]) if halved else np.nan,
           "first_overlap": float(profile["overlap"].iloc[0]), "last_overlap": float(profile["overlap"].iloc[-1]),
           "n_positions": int(profile["n_positions"].iloc[0])}
    return pd.DataFrame([row], columns=list(CONVERGENCE_COLUMNS))


# ------------------------------------------------------------------------------------------------ entries
#: One run's rows of the report's side-by-side figures, which stack these entries over every run of the report
#: (sst_interp/reporting/specs_families.py), and the comparison of every run's convergence.
FAMILY_STATE_DOC = {"run": "run name", "family": "sst, hrm_text or inkling2_loop",
                    "iteration": "i >= 2: the transition i-1 -> i of the deepest depth",
                    "overlap": "mean top-k |value| overlap of the carried state, k = the manifest's sketch_k",
                    "relative_change": "mean ||s_i - s_{i-1}|| / ||s_{i-1}|| of the carried state",
                    "n_positions": "full positions averaged"}
FAMILY_CAPACITY_DOC = {"run": "run name", "family": "sst, hrm_text or inkling2_loop",
                       "depth": "the family's loop count", "accuracy_pct": "accuracy at that flat depth",
                       "staged_capacity_pct": "correct at some depth <= this one",
                       "n_questions": "questions recorded at every depth"}


def _family_figure(profile: Callable[[Any, str], pd.DataFrame | NotApplicable]) -> Callable[[Any], Any]:
    """A run's rows of a cross-family figure, as figure data (or the reason the run cannot give them)."""
    def compute(a: Any) -> Any:
        result = profile(a.run, a.run.path.name)
        return result if isinstance(result, NotApplicable) else FigureData({"main": result}, {})

    return compute


FAMILY_CONVERGENCE_DOC = {"run": "run name", "family": "sst, hrm_text or inkling2_loop",
                          "depth": "the deepest depth (the family's loop count)",
                          "first_change": "mean relative L2 change of the carried state, transition 1 -> 2",
                          "last_change": "the same for the last transition (depth-1 -> depth)",
                          "last_over_first": "last_change / first_change",
                          "half_change_iteration": "first iteration i >= 3 whose change is at most half of "
                          "first_change (NaN: none)",
                          "first_overlap": "top-k |value| overlap of the transition 1 -> 2",
                          "last_overlap": "the same for the last transition", "n_positions": "full positions averaged"}


def _family_convergence(c: Any) -> Any:
    """Every run of a comparison, one row each; the runs without a state profile are named in the notes."""
    rows, skipped = [], []
    for name, run in c.runs.items():
        result = convergence_profile(run, name)
        if isinstance(result, NotApplicable):
            skipped.append(f"{name}: {result.reason}")
        else:
            rows.append(result)
    if not rows:
        return NotApplicable("; ".join(skipped) or "no run given", "tab_family_convergence")
    frame = pd.concat(rows, ignore_index=True)
    if skipped:
        frame.attrs["runs_left_out"] = "; ".join(skipped)
    return Frame(frame)


MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(name="family_state", label="", title="The carried loop state across iterations (overlap and relative "
                "change), comparable across families.", requires=("iterations",), compute=_family_figure(state_profile),
                tidy=figure_main, columns=FAMILY_STATE_DOC, kind="figure"),
    Measurement(name="family_capacity", label="", title="Accuracy and staged capacity per loop count, comparable "
                "across families.", requires=("depths",), compute=_family_figure(capacity_profile), tidy=figure_main,
                columns=FAMILY_CAPACITY_DOC, kind="figure"),
    Measurement(name="family_convergence", label="", title="How fast the carried loop state settles (first and last "
                "transitions' relative change), every run side by side.", requires=(), compute=_family_convergence,
                tidy=lambda r: tidy.renamed(r.table(), {}), columns=FAMILY_CONVERGENCE_DOC, scope="comparison",
                found=by_computing("family_convergence"), family=sections.ACROSS_FAMILIES, inputs=("runs",),
                caption="How fast the carried loop state settles, every run of the report side by side: the relative "
                "L2 change of its first (1 -> 2) and last iteration transitions, their ratio, the first iteration "
                "whose change is at most half the first one, and the top-k overlap at both ends."),
)
