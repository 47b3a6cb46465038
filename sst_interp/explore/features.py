"""The features view: a sparse dictionary's top features at one position and iteration, each with its activation at
every iteration (``python -m sst_interp.explore RUN --dictionary PATH``; docs/features.md).

The dictionary is checked when the explorer starts (:func:`check_dictionary`: its sidecar and files, and the run's
width) and loaded on the first request (SAELens and torch stay off the server's start-up). One request encodes one
question's states at the dictionary's site (:meth:`~sst_interp.features.dictionary.DictionarySet.encode_run` with
``question_ids``), cached by the run source, so stepping through positions and iterations encodes nothing again.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from sst_interp import features
from sst_interp.explore.question import check_question
from sst_interp.explore.source import RunSource
from sst_interp.features.meta import ITERATION_FOLDER, DictionaryMeta, is_dictionary, read_meta
from sst_interp.kernels.errors import UsageError
from sst_interp.store import Run

#: How many features the view lists (the largest activations at the chosen iteration).
TOP = 8


def check_dictionary(path: Path, run: Run) -> DictionaryMeta:
    """The sidecar of the dictionary (or of the first of a per-iteration set) at ``path``, checked against the run's
    width without loading SAELens; UsageError (one line) otherwise."""
    folder = Path(path)
    if folder.is_dir() and not is_dictionary(folder):
        parts = sorted(p for p in folder.iterdir() if p.is_dir() and p.name.startswith(ITERATION_FOLDER[:-2]))
        folder = parts[0] if parts else folder
    meta = read_meta(folder)
    if meta.d_in != run.hidden_size:
        raise UsageError(f"--dictionary {path} was trained on states of width d = {meta.d_in}; {run.path} holds "
                         f"d = {run.hidden_size}: use a dictionary of this model")
    return meta


class DictionaryLoader:
    """The explorer's dictionary set, loaded once on first use (thread-safe: the endpoints run in a pool)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._loaded: Any = None

    def get(self) -> Any:
        with self._lock:
            if self._loaded is None:
                self._loaded = features.DictionarySet.load(self.path)
            return self._loaded


def _unavailable(message: str) -> dict[str, Any]:
    return {"available": False, "message": message}


def encoded(source: RunSource, loader: DictionaryLoader, qid: str) -> tuple[Any, Any]:
    """(the dictionaries' site in the run, the question's :class:`FeatureActivations`), through the source's
    cache."""
    def read(run: Run) -> tuple[Any, Any]:
        loaded = loader.get()
        return loaded.site(run), loaded.encode_run(run, question_ids=[qid])

    return source.block(("features", str(loader.path), qid), read)


def features_view(source: RunSource, loader: DictionaryLoader | None, qid: str, depth: int, turn: int,
                  position: int, iteration: int | None = None, top: int = TOP) -> dict[str, Any]:
    """What the features panel shows at ``iteration`` (None: the first encoded) of one position.

    Returns ``{available: false, message}`` without a dictionary, at another depth than the dictionary's, or at a
    position without full states; else ``iteration``, ``iterations`` [I], ``layer``, ``layer_name``, ``layout``,
    ``width``, ``dictionary`` (its path), ``active`` (features active at the iteration), ``note`` (None, or why a
    per-iteration set's rows are not one direction) and ``rows``: up to ``top`` features, largest activation at the
    iteration first, each ``{feature, activation, activations [I]}`` (float32 values as encoded, 0 where inactive).

    Raises:
        UsageError: the question or iteration is not recorded.
    """
    check_question(source, qid, depth)
    if loader is None:
        return _unavailable("no dictionary given; start the explorer with --dictionary PATH (a folder of python -m "
                            "sst_interp.features train)")
    site, acts = encoded(source, loader, qid)
    if depth != site.depth:
        return _unavailable(f"the dictionary reads the states of depth {site.depth}; pick a token at depth "
                            f"{site.depth}")
    rows = acts.rows
    at = np.flatnonzero((rows["turn"].to_numpy() == turn) & (rows["position"].to_numpy() == position))
    if at.size == 0:
        full = int(source.run.manifest.get("full_positions") or 0)
        return _unavailable(f"no full states at position {position} of turn {turn} (the run keeps them at positions "
                            f"0-{full - 1}), so there is nothing to encode")
    iterations = rows["iteration"].to_numpy()[at]
    order = np.argsort(iterations, kind="stable")
    at, iterations = at[order], [int(i) for i in iterations[order]]
    iteration = iterations[0] if iteration is None else int(iteration)
    if iteration not in iterations:
        raise UsageError(f"iteration {iteration} is not encoded at position {position} (iterations {iterations})")
    dense = acts.activations[at].toarray()  # [I, width]
    chosen = dense[iterations.index(iteration)]
    active = np.flatnonzero(chosen)
    ranked = active[np.lexsort((active, -chosen[active]))][:top]
    loaded = loader.get()
    shared = loaded.layout == "shared"
    note = None if shared else ("per-iteration dictionaries: feature f is another direction at each iteration, so "
                                "a row's other iterations are not the same feature")
    return {"available": True, "question_id": qid, "depth": depth, "turn": turn, "position": position,
            "iteration": iteration, "iterations": iterations, "layer": site.layer, "layer_name": site.layer_name,
            "layout": loaded.layout, "width": loaded.meta.width, "dictionary": str(loader.path),
            "active": int(active.size), "note": note,
            "rows": [{"feature": int(f), "activation": float(chosen[f]),
                      "activations": [float(v) for v in dense[:, f]]} for f in ranked]}
