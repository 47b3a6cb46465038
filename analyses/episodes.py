"""How CodeACT episodes are conducted, per depth: does the model act, and does it finish (app:dataset_format).

The paper reports accuracy only; these rates say whether a model speaks the protocol at all, which is the first
thing to check on a small or newly trained SST (a model that never opens an ``<execute>`` block scores 0 for a
reason that accuracy cannot show).

- ``first_turn_action``: the episode's first model turn holds a well-formed block: the ``<execute>`` action token,
  later the ``</execute>`` action token that ended the turn (``stop_reason == "execute"``), and code between them.
- ``finished``: the episode ended with a ``finish_session(...)`` call that the sandbox ran.
- ``accuracy``: the episode's verdict (the graded ``finish_session`` answer).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from sst_interp.analyses import sections, tidy
from sst_interp.analyses.measurement import Frame, Measurement
from sst_interp.kernels.results import NotApplicable
from sst_interp.store import Run

COLUMNS = ["depth", "episodes", "first_turn_action", "finished", "accuracy", "mean_model_turns"]


def well_formed_action(token_ids: list[int], stop_reason: str, open_id: int, close_id: int) -> bool:
    """A model turn's tokens hold ``<execute>`` code ``</execute>``, the closing token ending the turn.

    Args:
        token_ids: the turn's generated token ids.
        stop_reason: the turn's stop reason (``execute`` when ``</execute>`` ended it).
        open_id, close_id: the action token ids.
    """
    ids = list(token_ids)
    if stop_reason != "execute" or not ids or ids[-1] != close_id or open_id not in ids:
        return False
    return ids.index(open_id) < len(ids) - 2  # at least one code token between the two action tokens


def episode_conduct(run: Run) -> pd.DataFrame | NotApplicable:
    """Per depth: episodes, and the fractions that act in their first turn, finish, and are correct.

    Returns:
        DataFrame with :data:`COLUMNS` (fractions in [0, 1]), one row per depth; NotApplicable for a run recorded
        with the single-completion protocol.
    """
    if run.protocol != "codeact":
        return NotApplicable(f"the run was recorded with --protocol {run.protocol}; episode conduct needs codeact "
                             "episodes", "episode conduct")
    actions = (run.manifest.get("episode") or {}).get("action_tokens") or {}
    if set(actions) != {"<execute>", "</execute>"}:
        return NotApplicable("the run's manifest does not name its action token ids", "episode conduct")
    open_id, close_id = int(actions["<execute>"]), int(actions["</execute>"])
    episodes = run.episodes()
    gens = run.generations()
    first = gens[gens["turn"] == 0].set_index(["depth", "question_id"])
    rows = []
    for depth, group in episodes.groupby("depth", sort=True):
        acted = [well_formed_action(first.at[(depth, q), "token_ids"], first.at[(depth, q), "stop_reason"],
                                    open_id, close_id) if (depth, q) in first.index else False
                 for q in group["question_id"]]
        rows.append({
            "depth": int(depth),
            "episodes": len(group),
            "first_turn_action": float(pd.Series(acted, dtype=float).mean()),
            "finished": float((group["stop_reason"] == "finish_session").mean()),
            "accuracy": float(group["correct"].astype(float).mean()),
            "mean_model_turns": float(group["n_turns"].mean()),
        })
    return pd.DataFrame(rows, columns=COLUMNS)


# ------------------------------------------------------------------------------------------------ entry
def _episode_conduct(a: Any) -> Any:
    # The SST's episodes, and the matched baseline's beside them when there is one (its rows first).
    result = episode_conduct(a.run)
    if isinstance(result, NotApplicable):
        return result
    frames = [result.assign(model="SST")]
    if a.baseline is not None:
        base = episode_conduct(a.baseline)
        if not isinstance(base, NotApplicable):
            frames.insert(0, base.assign(model="baseline"))
    table = pd.concat(frames, ignore_index=True)
    return Frame(table[["model", *[c for c in result.columns]]])


MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(name="episode_conduct", label="", title="CodeACT episode conduct per depth, of the SST and of its "
                "matched baseline when one is given.", requires=("codeact",), compute=_episode_conduct,
                tidy=lambda r: tidy.renamed(r.table(), {}),
                columns={"model": "SST or baseline", "depth": "depth", "episodes": "episodes",
                         "first_turn_action": "fraction whose first turn is a well-formed <execute> block",
                         "finished": "fraction ending with finish_session", "accuracy": "fraction correct",
                         "mean_model_turns": "model turns per episode"}, family=sections.EVALUATION,
                inputs=("run", "baseline"), caption="CodeACT episode conduct per depth: fractions of episodes whose "
                "first model turn is a well-formed <execute> block, that end with finish_session, and that are correct "
                "(app:dataset_format)."),
)
