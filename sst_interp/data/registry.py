"""``load_questions``: one entry point for every question source.

Sources and their options (passed as keyword arguments):

=========  ============================================  =====================================
name       file (shared data layout)                     options
=========  ============================================  =====================================
demo       built in                                      ``n`` (24), ``seed`` (0), ``level``
gsm8k      ``gsm8k/test.jsonl``                          ``split`` (``test`` | ``train``)
gpqa       ``gpqa/dataset.zip``                          ``subset`` (``diamond``), ``password``
math500    ``math500/test.jsonl``                        none
humaneval  ``humaneval/HumanEval.jsonl.gz``              none
hops       generated (:mod:`sst_interp.data.hops`)       ``split``, ``n``, ``bindings``, ``max_hops``, ...
=========  ============================================  =====================================
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sst_interp.data.demo import load_demo
from sst_interp.data.gpqa import gpqa_file, load_gpqa
from sst_interp.data.hops import load_hops
from sst_interp.data.loaders import gsm8k_file, humaneval_file, load_gsm8k, load_humaneval, load_math500, math500_file
from sst_interp.data.question import Question, select_questions
from sst_interp.kernels.errors import UsageError

LOADERS: dict[str, Callable[..., list[Question]]] = {
    "demo": load_demo,
    "gsm8k": load_gsm8k,
    "gpqa": load_gpqa,
    "math500": load_math500,
    "humaneval": load_humaneval,
    "hops": load_hops,
}

FILE_RESOLVERS: dict[str, Callable[..., Path]] = {
    "gsm8k": gsm8k_file,
    "gpqa": gpqa_file,
    "math500": math500_file,
    "humaneval": humaneval_file,
}


def known_sources() -> list[str]:
    """Names accepted by :func:`load_questions`."""
    return list(LOADERS)


def load_questions(
    name: str,
    data_path: str | os.PathLike[str] | None = None,
    limit: int | None = None,
    ids: Sequence[str] | None = None,
    **options: Any,
) -> list[Question]:
    """Load the questions of source ``name``, then keep ``ids`` (in that order) and the first ``limit``.

    Args:
        name: a source in :data:`LOADERS`.
        data_path: a local file or folder (``--data``); None uses ``$SST_INTERP_DATA_DIR`` or the hub.
        limit: keep at most this many questions.
        ids: keep only these question ids; an unknown id is a UsageError.
        **options: source options (table in the module docstring); an unknown option is a UsageError.
    """
    loader = LOADERS.get(name)
    if loader is None:
        raise UsageError(f"unknown question set {name!r}; known: {', '.join(LOADERS)}")
    accepted = [p for p in inspect.signature(loader).parameters if p != "path"]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise UsageError(f"question set {name!r} has no options {unknown}; it accepts {accepted or 'none'}")
    questions = loader(data_path, **options)
    if not questions:
        shown = ", ".join(f"{key}={value}" for key, value in options.items())
        raise UsageError(f"question set {name!r}{f' with {shown}' if shown else ''} holds no questions; "
                         "give options that select at least one")
    return select_questions(questions, limit=limit, ids=ids)


def data_file(name: str, data_path: str | os.PathLike[str] | None = None, **options: Any) -> Path | None:
    """The local file :func:`load_questions` reads for these arguments (None for the built-in demo).

    For a run manifest's data identity (path and sha256). Options that do not choose the file
    (e.g. GPQA's ``password``, the demo's ``seed``) are ignored here.
    """
    if name not in LOADERS:
        raise UsageError(f"unknown question set {name!r}; known: {', '.join(LOADERS)}")
    resolver = FILE_RESOLVERS.get(name)
    if resolver is None:
        return None
    accepted = set(inspect.signature(resolver).parameters) - {"path"}
    return resolver(data_path, **{key: value for key, value in options.items() if key in accepted})
