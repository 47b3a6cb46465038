"""The attention view: what each recorded (layer, head) reads at one query position and iteration (``record
--attention``; ``docs/format.md``, ``attention/``).

One request reads one (question, depth, turn, position): :meth:`~sst_interp.store.Run.attention` filtered to the
question (its row group) and the position, cached by the run source so stepping through the iterations reads
nothing again. Nothing is read at start-up.

A key is named by its index in the row's own context (the prompt's tokens from 0, then every token fed after
them). :func:`context_layout` rebuilds that context from the run's tables: the prompt encoded with the run's
tokenizer (checked against the recorded ``prompt_tokens``), then each turn's generated tokens, and, in a CodeACT
run, each tool response's ``appended_tokens`` (their ids are not stored: shown as ``⟨tool⟩``). A key the layout
cannot name is shown by its index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.explore.arrays import plain
from sst_interp.explore.question import check_question
from sst_interp.explore.source import RunSource
from sst_interp.kernels.errors import UsageError

#: How a run without attention says how to get it.
RECORD_HINT = "record it with python -m sst_interp.record ... --attention all (docs/format.md, attention/)"
#: The heaviest keys named per (layer, head).
HEAVIEST = 3
#: The piece of a tool-response token (fed between CodeACT turns; its ids are not stored).
TOOL_PIECE = "\u27e8tool\u27e9"


@dataclass(frozen=True)
class Layout:
    """The context a query position sees, key index by key index.

    Args:
        pieces: the display piece of each key index ``0 .. len - 1``.
        kinds: per key index, ``prompt``, ``generated`` (of this or an earlier turn), ``tool`` or ``unknown``.
        prompt_tokens: the prompt's length in tokens.
        note: why some keys have no text (None when every key is named).
    """

    pieces: list[str]
    kinds: list[str]
    prompt_tokens: int
    note: str | None


def context_layout(prompt_ids: list[int] | None, prompt_tokens: int, turns: list[tuple[list[int], int]],
                   turn: int, position: int, pieces: Any) -> Layout:
    """The keys of the query at generated ``position`` of ``turn``: ``prompt_tokens + sum over earlier turns of
    (tokens + appended) + position`` of them.

    Args:
        prompt_ids: the prompt encoded with the run's tokenizer (None: no tokenizer on this machine).
        prompt_tokens: the prompt's length as recorded (``generations.prompt_tokens`` of turn 0).
        turns: per turn from 0, ``(token_ids, appended_tokens)`` (a completion run: one turn, 0 appended).
        turn, position: the query.
        pieces: ``ids -> display pieces`` (:meth:`sst_interp.explore.tokens.TokenText.pieces`).
    """
    note = None
    if prompt_ids is not None and len(prompt_ids) == prompt_tokens:
        out, kinds = list(pieces(prompt_ids)), ["prompt"] * prompt_tokens
    else:
        note = ("no tokenizer for this run: prompt keys are shown by index" if prompt_ids is None else
                f"the prompt re-encoded with the run's tokenizer has {len(prompt_ids)} tokens, not the "
                f"{prompt_tokens} recorded: prompt keys are shown by index")
        out, kinds = [f"#{i}" for i in range(prompt_tokens)], ["unknown"] * prompt_tokens
    for t in range(turn + 1):
        ids, appended = turns[t] if t < len(turns) else ([], 0)
        fed = ids if t < turn else ids[:position]  # the query at position p has seen its turn's first p tokens
        out += pieces(fed)
        kinds += ["generated"] * len(fed)
        if t < turn:
            out += [TOOL_PIECE] * appended
            kinds += ["tool"] * appended
    if turn > 0:
        note = "; ".join(filter(None, [note, "tool responses fed between turns are shown as \u27e8tool\u27e9 "
                                              "(the run stores their length, not their tokens)"]))
    return Layout(out, kinds, prompt_tokens, note)


def _generations(source: RunSource, qid: str, depth: int) -> pd.DataFrame:
    gens = source.table("generations")
    return gens[(gens["question_id"] == qid) & (gens["depth"] == depth)].sort_values("turn")


def _layout(source: RunSource, qid: str, depth: int, turn: int, position: int) -> Layout:
    gens = _generations(source, qid, depth)
    first = gens.iloc[0]
    questions = source.table("questions")
    prompt = str(questions.loc[questions["question_id"] == qid, "prompt"].iloc[0])
    recorded = first.get("prompt_tokens")
    prompt_ids = source.tokens.encode(prompt)
    if recorded is None or pd.isna(recorded):  # a run written before prompt_tokens: trust the encoding
        recorded = len(prompt_ids) if prompt_ids is not None else 0
    appended = gens["appended_tokens"] if "appended_tokens" in gens.columns else pd.Series(0, index=gens.index)
    turns = [([int(t) for t in ids], 0 if pd.isna(a) else int(a)) for ids, a in zip(gens["token_ids"], appended)]
    return context_layout(prompt_ids, int(recorded), turns, turn, position, source.tokens.pieces)


@dataclass(frozen=True)
class PositionAttention:
    """The recorded attention of one query position, every iteration, compactly.

    Args:
        rows: ``(iteration, layer, head) -> (key positions [K] int64, weights [K] float32, remaining mass)``, keys
            in the stored order (ascending; heaviest first under top-k).
    """

    rows: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray, float]]

    @property
    def iterations(self) -> list[int]:
        return sorted({it for it, _, _ in self.rows})


def read_position(source: RunSource, qid: str, depth: int, turn: int, position: int) -> PositionAttention:
    """The attention rows of one (question, depth, turn, position), through the source's cache (one question's row
    group is read, then only this position's rows kept)."""

    def read(run: Any) -> PositionAttention:
        frame = run.attention(depth, [qid], turn=turn, positions=[position])
        rows = {}
        for (it, layer, head), part in frame.groupby(["iteration", "layer", "head"], sort=True):
            rows[(int(it), int(layer), int(head))] = (part["key_position"].to_numpy(np.int64),
                                                      part["weight"].to_numpy(np.float32),
                                                      float(part["remaining_mass"].iloc[0]))
        return PositionAttention(rows)

    return source.block(("attention", qid, depth, turn, position), read)


def _unavailable(message: str) -> dict[str, Any]:
    return {"available": False, "message": message}


def attention_view(source: RunSource, qid: str, depth: int, turn: int, position: int,
                   iteration: int | None = None) -> dict[str, Any]:
    """What the attention panel shows at ``iteration`` (None: the first recorded) of one query position.

    Returns ``{available: false, message}`` when the run recorded no attention or none at this position, else
    ``query_token`` (the piece the position chose), ``iterations`` [I] (the recorded ones, for the selector),
    ``iteration``, ``top_k`` (None: every key stored),
    ``keys`` [T] (the piece of each key index the query sees), ``key_kinds`` [T], ``prompt_tokens``,
    ``keys_note``, ``layer_names`` (``{layer: name}`` of a looped family's manifest, else empty) and ``rows``: one
    per recorded (layer, head), ``{layer, head, keys [K], weights [K], remaining_mass, heaviest}`` with the
    weights exactly as stored (float32) and ``heaviest`` the :data:`HEAVIEST` heaviest ``{key, piece, weight}``.

    Raises:
        UsageError: the question, turn or iteration is not recorded.
    """
    check_question(source, qid, depth)
    run = source.run
    recorded = run.manifest.get("attention")
    if not recorded:
        return _unavailable(f"this run recorded no attention; {RECORD_HINT}")
    full = int(run.manifest.get("full_positions") or 0)
    if position >= full:
        return _unavailable(f"attention is recorded at the full positions 0-{full - 1} of each turn; position "
                            f"{position} is past them")
    gens = _generations(source, qid, depth)
    tokens = gens.loc[gens["turn"] == turn, "token_ids"]
    if tokens.empty or not 0 <= position < len(tokens.iloc[0]):
        raise UsageError(f"{qid!r} depth {depth} has no position {position} in turn {turn} (its turns: "
                         f"{dict(zip(gens['turn'].tolist(), map(len, gens['token_ids'])))} tokens)")
    chosen = int(tokens.iloc[0][position])
    data = read_position(source, qid, depth, turn, position)
    if not data.rows:
        return _unavailable(f"no attention recorded at position {position} of {qid!r} depth {depth} turn {turn}")
    iterations = data.iterations
    iteration = iterations[0] if iteration is None else int(iteration)
    if iteration not in iterations:
        raise UsageError(f"iteration {iteration} is not recorded at position {position} (iterations "
                         f"{iterations})")
    layout = _checked(_layout(source, qid, depth, turn, position), data, iteration, recorded.get("top_k"))
    rows = []
    for (it, layer, head), (keys, weights, rest) in data.rows.items():
        if it != iteration:
            continue
        order = np.argsort(-weights, kind="stable")[:HEAVIEST]
        rows.append({"layer": layer, "head": head, "keys": keys.tolist(),
                     "weights": [float(w) for w in weights], "remaining_mass": plain(rest, None),
                     "heaviest": [{"key": int(keys[j]), "piece": _piece(layout, int(keys[j])),
                                   "weight": float(weights[j])} for j in order]})
    loop = run.manifest.get("loop")
    names = (loop.get("layers") if isinstance(loop, dict) else None) or []
    return {"available": True, "question_id": qid, "depth": depth, "turn": turn, "position": position,
            "query_token": source.tokens.pieces([chosen])[0], "iteration": iteration, "iterations": iterations,
            "top_k": recorded.get("top_k"),
            "keys": layout.pieces, "key_kinds": layout.kinds, "prompt_tokens": layout.prompt_tokens,
            "keys_note": layout.note, "layer_names": {str(i): str(n) for i, n in enumerate(names)}, "rows": rows}


def _checked(layout: Layout, data: PositionAttention, iteration: int, top_k: int | None) -> Layout:
    """``layout`` padded to the largest key index stored (by index), with a note when the keys and the context
    rebuilt from the tables disagree: every key stored ends at the query's own token, the context's last."""
    ends = [int(keys.max()) for (it, _, _), (keys, _, _) in data.rows.items() if it == iteration and keys.size]
    if not ends:
        return layout
    end = max(ends)
    pieces, kinds, note = list(layout.pieces), list(layout.kinds), layout.note
    if end >= len(pieces):
        pieces += [f"#{i}" for i in range(len(pieces), end + 1)]
        kinds += ["unknown"] * (end + 1 - len(kinds))
    if end + 1 != len(layout.pieces) and top_k is None:
        note = "; ".join(filter(None, [note, f"the keys end at index {end} but the context rebuilt from the run's "
                                             f"tables has {len(layout.pieces)} tokens: key texts may be shifted"]))
    return Layout(pieces, kinds, layout.prompt_tokens, note)


def _piece(layout: Layout, key: int) -> str:
    return layout.pieces[key] if 0 <= key < len(layout.pieces) else f"#{key}"
