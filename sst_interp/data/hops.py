"""The ``hops`` source: pointer-chasing questions with their ground truth, for the model organisms.

Each question's ``metadata`` holds what the analyses check the model against: ``hops`` (the bindings followed),
``chain`` (``chain[i]`` is the hop-i value), ``chains`` (the chance rate is ``1 / chains``), ``successors`` (every
variable's own chain) and ``split``; a counted question (``?3c``) also ``counted``, ``beyond`` (bindings its chain
runs past the answer) and ``overshoot`` (the values one and two hops past the answer, stopping at the chain's
digit: what a model that keeps following the chain answers).

The defaults here are :class:`sst_interp.organism.task.HopsSpec`'s; ``record --questions hops`` with an organism
folder as ``--model`` asks the spec that organism was trained on (its ``organism.json``;
:mod:`sst_interp.organism.carried`). ``--source-option`` changes any field (``split``, ``n``, ``bindings``,
``min_hops``, ``max_hops``, ``chains``, ``variables``, ``seed``, ``counted``, ``beyond``).
"""

from __future__ import annotations

import os

from sst_interp.data.question import Question
from sst_interp.kernels.errors import UsageError
from sst_interp.organism.task import SPLITS, HopsQuestion, HopsSpec, as_flag, split_items

DEFAULT_SPEC = HopsSpec()
DEFAULT_SPLIT = "test"
DEFAULT_SIZE = 240


def load_hops(path: str | os.PathLike[str] | None = None, split: str = DEFAULT_SPLIT, n: int = DEFAULT_SIZE,
              bindings: int = DEFAULT_SPEC.bindings, min_hops: int = DEFAULT_SPEC.min_hops,
              max_hops: int = DEFAULT_SPEC.max_hops, chains: int = DEFAULT_SPEC.chains,
              variables: int = DEFAULT_SPEC.variables, seed: int = DEFAULT_SPEC.seed,
              counted: bool | str = DEFAULT_SPEC.counted, beyond: int = DEFAULT_SPEC.beyond) -> list[Question]:
    """The first ``n`` questions of ``split`` (balanced over hop counts), ids ``hops-<split>-<index>``.

    ``path`` is accepted for the loaders' common signature and ignored: the set is generated, not read.
    Bad parameters (0 hops, more hops than bindings, more questions than the spec can make) are a UsageError.
    """
    del path
    spec = HopsSpec(bindings=bindings, min_hops=min_hops, max_hops=max_hops, chains=chains, variables=variables,
                    seed=seed, counted=as_flag(counted), beyond=beyond)
    if split not in SPLITS:
        raise UsageError(f"unknown hops split {split!r}; give --source-option split= one of {', '.join(SPLITS)}")
    return [
        Question(
            question_id=f"hops-{split}-{index:04d}",
            source="hops",
            prompt=q.prompt,
            reference=q.answer,
            metadata=_metadata(q, split, spec.counted),
        )
        for index, q in enumerate(split_items(spec, split, n))
    ]


def _metadata(question: HopsQuestion, split: str, counted: bool) -> dict[str, object]:
    """A question's ground truth (the module docstring lists the keys); the plain task's keys only for a plain
    question, so its questions table is the one recorded before counted hops existed."""
    metadata: dict[str, object] = {"hops": question.hops, "chain": list(question.chain), "chains": question.chains,
                                   "split": split,
                                   "successors": {v: list(c) for v, c in question.successors.items()}}
    if counted:
        metadata.update(counted=True, beyond=question.beyond,
                        overshoot=[question.overshoot(1), question.overshoot(2)])
    return metadata
