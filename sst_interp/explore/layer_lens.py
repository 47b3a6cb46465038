"""The explorer's per-layer logit lens: the model's final norm and unembedding are loaded on the first request for
this view (never at start: the other views need no model), once per server, and every layer's state at every
iteration of one position is read through them (:mod:`sst_interp.analyses.logit_lens`)."""

from __future__ import annotations

import threading
from typing import Any

from sst_interp.analyses.logit_lens import LensHead, layer_lens, load_lens_head
from sst_interp.explore.arrays import plain
from sst_interp.explore.question import check_question
from sst_interp.explore.source import RunSource
from sst_interp.kernels.results import NotApplicable


class LensLoader:
    """The run's lens head, loaded once on first use (requests wait for the one load in progress)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._head: LensHead | NotApplicable | None = None

    def head(self, manifest: dict[str, Any]) -> LensHead | NotApplicable:
        """The loaded head, or why the model cannot be loaded (the same answer on every later call)."""
        with self._lock:
            if self._head is None:
                self._head = load_lens_head(manifest)
            return self._head

    @property
    def loaded(self) -> bool:
        """Whether a head (or the reason there is none) is held."""
        return self._head is not None


def lens_view(source: RunSource, loader: LensLoader, qid: str, depth: int, turn: int,
              position: int) -> dict[str, Any]:
    """``{available, message}`` or ``{available, model, iterations [I], layers [L], token_ids [I][L],
    pieces [I][L], logprob [I][L]}``: each layer's top-1 token and its log-prob (nats) at each iteration."""
    check_question(source, qid, depth)
    head = loader.head(source.run.manifest)
    if isinstance(head, NotApplicable):
        return {"available": False, "message": head.reason}
    frame = layer_lens(source.run, head, qid, depth, position, turn, top_n=1)
    if isinstance(frame, NotApplicable):
        return {"available": False, "message": frame.reason}
    grid = frame.pivot(index="iteration", columns="layer", values="token_id")
    logprob = frame.pivot(index="iteration", columns="layer", values="logprob")
    ids = grid.to_numpy().tolist()
    return {"available": True, "model": head.model, "iterations": grid.index.tolist(),
            "layers": grid.columns.tolist(), "token_ids": ids,
            "pieces": [source.tokens.pieces(row) for row in ids], "logprob": plain(logprob.to_numpy(), 5)}
