"""The ``hops`` source: pointer-chasing questions with their ground truth, for the model organisms.

Each question's ``metadata`` holds what the analyses check the model against: ``hops`` (the bindings followed),
``chain`` (``chain[i]`` is the hop-i value), ``chains`` (the chance rate is ``1 / chains``), ``successors`` (every
variable's own chain) and ``split``. The defaults are the spec the shipped organisms were trained on
(:class:`sst_interp.organism.task.HopsSpec`), so ``--questions hops`` asks them the questions they were trained
for; ``--source-option`` changes any field (``split``, ``n``, ``bindings``, ``min_hops``, ``max_hops``,
``chains``, ``variables``, ``seed``).
"""

from __future__ import annotations

import os

from sst_interp.data.question import Question
from sst_interp.kernels.errors import UsageError
from sst_interp.organism.task import SPLITS, HopsSpec, split_items

DEFAULT_SPEC = HopsSpec()
DEFAULT_SPLIT = "test"
DEFAULT_SIZE = 240


def load_hops(path: str | os.PathLike[str] | None = None, split: str = DEFAULT_SPLIT, n: int = DEFAULT_SIZE,
              bindings: int = DEFAULT_SPEC.bindings, min_hops: int = DEFAULT_SPEC.min_hops,
              max_hops: int = DEFAULT_SPEC.max_hops, chains: int = DEFAULT_SPEC.chains,
              variables: int = DEFAULT_SPEC.variables, seed: int = DEFAULT_SPEC.seed) -> list[Question]:
    """The first ``n`` questions of ``split`` (balanced over hop counts), ids ``hops-<split>-<index>``.

    ``path`` is accepted for the loaders' common signature and ignored: the set is generated, not read.
    Bad parameters (0 hops, more hops than bindings, more questions than the spec can make) are a UsageError.
    """
    del path
    spec = HopsSpec(bindings=bindings, min_hops=min_hops, max_hops=max_hops, chains=chains, variables=variables,
                    seed=seed)
    if split not in SPLITS:
        raise UsageError(f"unknown hops split {split!r}; give --source-option split= one of {', '.join(SPLITS)}")
    return [
        Question(
            question_id=f"hops-{split}-{index:04d}",
            source="hops",
            prompt=q.prompt,
            reference=q.answer,
            metadata={"hops": q.hops, "chain": list(q.chain), "chains": q.chains, "split": split,
                      "successors": {v: list(c) for v, c in q.successors.items()}},
        )
        for index, q in enumerate(split_items(spec, split, n))
    ]
