"""The summary ``record`` prints: accuracy and staged capacity per depth, from the run's episodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from sst_interp.analyses.episodes import episode_conduct

# staged_capacity is re-exported by sst_interp.record (its one definition is in sst_interp.kernels.outcomes).
from sst_interp.kernels.outcomes import staged_capacity
from sst_interp.store import Run


def print_summary(out: Path, depths: list[int], show: bool = True) -> dict[int, float]:
    """Print accuracy and staged capacity per depth and the run path; returns accuracy per depth. ``show=False``
    only returns it (the ranks of a multi-process recording other than rank 0).

    Correctness is per episode (``Run.episodes``): one completion in a completion run, one multi-turn episode in a
    CodeACT run; a CodeACT run also prints how its episodes ended and how many model turns they used.
    """

    run = Run.open(out)
    episodes = run.episodes()
    correct = {d: set(episodes.loc[(episodes["depth"] == d) & episodes["correct"], "question_id"]) for d in depths}
    common = [q for q in run.question_ids() if all(q in run.question_ids(d) for d in depths)]
    # Staged capacity over the questions complete at every depth: correct at some flat depth <= k.
    staged = staged_capacity(pd.DataFrame({d: [q in correct[d] for q in common] for d in depths}, index=common,
                                          dtype=bool))
    say = print if show else _silent
    accuracy = {}
    say(f"{'depth':>5}  {'accuracy':>16}  {'staged capacity':>16}")
    for depth in depths:
        n = len(run.question_ids(depth))
        right = len(correct[depth])
        accuracy[depth] = right / n if n else float("nan")
        staged_text = f"{staged[depth]}/{len(common)}" if common else "-"
        say(f"{depth:>5}  {right:>5}/{n:<4} {100 * accuracy[depth]:5.1f}%  {staged_text:>16}")
    if run.protocol == "codeact" and len(episodes):
        reasons = episodes["stop_reason"].value_counts().to_dict()
        turns = episodes["n_turns"]
        say(f"episodes: {len(episodes)}, model turns {int(turns.sum())} (mean {turns.mean():.2f}, max "
            f"{int(turns.max())}); ended by " + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())))

        conduct = episode_conduct(run)
        if isinstance(conduct, pd.DataFrame):
            for row in conduct.itertuples(index=False):
                say(f"  depth {row.depth}: first turn acts (well-formed <execute>) {100 * row.first_turn_action:.0f}%, "
                    f"finished with finish_session {100 * row.finished:.0f}%")
    say(f"run: {out}")
    return accuracy


def _silent(*_args: Any, **_kwargs: Any) -> None:
    """Prints nothing."""
