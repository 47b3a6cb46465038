"""The question view: the prompt and, per depth, the transcript turn by turn with a summary per generated token.

Each token of a turn carries what its recorded logits say across the iterations of its position (the pass that
chose it): the argmax of every iteration (did it change?) and the entropy. The full top-K of one token (the hover)
is :func:`token_detail`, read from the same cached logits block. First divergences between every pair of depths
come from :func:`sst_interp.kernels.outcomes.first_divergence`, per turn.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.kernels.errors import UsageError
from sst_interp.explore.arrays import plain
from sst_interp.explore.source import RunSource
from sst_interp.kernels.outcomes import first_divergence
from sst_interp.store import LogitBlock
from sst_interp.store.schema import CODEACT_GENERATION_COLUMNS


def logit_block(source: RunSource, qid: str, depth: int, turn: int) -> LogitBlock | None:
    """The logits of one (question, depth, turn), cached for the hovers that follow (None: nothing recorded)."""
    return source.block(("logits", qid, depth, turn),
                        lambda run: next(iter(run.logits(depth, [qid], turn=turn)), None))


def check_question(source: RunSource, qid: str, depth: int | None = None) -> None:
    """UsageError unless ``qid`` is recorded (at ``depth`` when given)."""
    run = source.run
    depths = [depth] if depth is not None else run.depths
    if depth is not None and depth not in run.depths:
        raise UsageError(f"depth {depth} is not in this run (depths {run.depths})")
    if not any(qid in run.question_ids(d) for d in depths):
        raise UsageError(f"question {qid!r} is not recorded{'' if depth is None else f' at depth {depth}'} in "
                         f"{run.path}")


def _token_summaries(ids: list[int], block: LogitBlock | None, source: RunSource) -> list[dict[str, Any]]:
    pieces = source.tokens.pieces(ids)
    at = {int(p): j for j, p in enumerate(block.positions)} if block is not None else {}
    out = []
    for p, (tid, piece) in enumerate(zip(ids, pieces)):
        token: dict[str, Any] = {"position": p, "id": int(tid), "piece": piece}
        j = at.get(p)
        if j is not None:
            argmax = block.argmax[j]
            seen = argmax[argmax >= 0]
            token["argmax"] = argmax.tolist()
            token["changed"] = bool(np.unique(seen).size > 1)
            token["entropy"] = plain(block.entropy[j], 4)
        out.append(token)
    return out


def question_view(source: RunSource, qid: str) -> dict[str, Any]:
    """Everything the question view shows for ``qid`` (see the module docstring); reads its logits only."""
    check_question(source, qid)
    run = source.run
    questions = source.table("questions")
    qrow = questions[questions["question_id"] == qid]
    gens = source.table("generations")
    gens = gens[gens["question_id"] == qid].sort_values(["depth", "turn"])
    episodes = source.table("episodes")
    episodes = episodes[episodes["question_id"] == qid]
    extra = [c for c in CODEACT_GENERATION_COLUMNS if c in gens.columns]
    depths = []
    traces: dict[int, dict[int, list[int]]] = {}
    for depth, part in gens.groupby("depth", sort=True):
        depth = int(depth)
        episode = episodes[episodes["depth"] == depth]
        turns = []
        for _, row in part.iterrows():
            turn = int(row["turn"])
            ids = [int(t) for t in row["token_ids"]]
            traces.setdefault(depth, {})[turn] = ids
            entry = {"turn": turn, "text": str(row["text"]), "stop_reason": str(row["stop_reason"]),
                     "tokens": _token_summaries(ids, logit_block(source, qid, depth, turn), source)}
            for column in extra:
                value = row[column]
                entry[column] = None if value is None or (isinstance(value, float) and np.isnan(value)) else str(value)
            turns.append(entry)
        ep = episode.iloc[0] if len(episode) else None
        depths.append({
            "depth": depth, "turns": turns,
            "n_turns": int(ep["n_turns"]) if ep is not None else len(turns),
            "stop_reason": str(ep["stop_reason"]) if ep is not None else None,
            "final_answer": None if ep is None or pd.isna(ep["final_answer"]) else str(ep["final_answer"]),
            "correct": None if ep is None or pd.isna(ep["correct"]) else bool(ep["correct"]),
        })
    divergence = {}
    for a, b in combinations(sorted(traces), 2):
        shared = sorted(set(traces[a]) & set(traces[b]))
        divergence[f"{a}-{b}"] = {str(t): first_divergence(traces[a][t], traces[b][t]) for t in shared}
    return {
        "question_id": qid, "protocol": run.protocol,
        "prompt": str(qrow["prompt"].iloc[0]) if len(qrow) else "",
        "reference": None if not len(qrow) or pd.isna(qrow["reference"].iloc[0]) else str(qrow["reference"].iloc[0]),
        "depths": depths, "divergence": divergence, "tokenizer": source.tokens.source,
        "full_positions": int(run.manifest.get("full_positions") or 0),
    }


def token_detail(source: RunSource, qid: str, depth: int, turn: int, position: int) -> dict[str, Any]:
    """The hover of one generated token: per iteration the top-N tokens and log-probs, the entropy, and the
    tracked log-probs (the iteration-1 top-N followed through every iteration).

    Returns ``iterations`` [I], ``top`` [I][N] of ``{id, piece, logprob}``, ``entropy`` [I], ``argmax`` [I] and
    ``argmax_pieces`` [I] (decoded),
    ``tracked`` ``{ids [N], pieces [N], logprobs [I][N]}`` (None cells: the iteration did not run there).
    """
    check_question(source, qid, depth)
    block = logit_block(source, qid, depth, turn)
    if block is None or position not in block.positions.tolist():
        raise UsageError(f"no logits recorded for {qid!r} depth {depth} turn {turn} position {position}")
    j = block.positions.tolist().index(position)
    n = min(source.config.top_n, block.top_ids.shape[-1])
    top = []
    for i in range(block.iterations.size):
        ids = block.top_ids[j, i, :n].tolist()
        pieces = source.tokens.pieces(ids)
        top.append([{"id": t, "piece": s, "logprob": plain(lp, 5)}
                    for t, s, lp in zip(ids, pieces, block.top_logprobs[j, i, :n]) if t >= 0])
    tracked_ids = block.top_ids[j, 0, :n].tolist()
    return {
        "question_id": qid, "depth": depth, "turn": turn, "position": position,
        "iterations": block.iterations.tolist(), "top": top, "entropy": plain(block.entropy[j], 5),
        "argmax": block.argmax[j].tolist(), "argmax_pieces": source.tokens.pieces(block.argmax[j].tolist()),
        "tracked": {"ids": tracked_ids, "pieces": source.tokens.pieces(tracked_ids),
                    "logprobs": plain(block.tracked_logprobs[j, :, :n], 5)},
    }
