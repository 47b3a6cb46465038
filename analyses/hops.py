"""Measurements checked against the hops task's known mechanism (``--questions hops``; ``docs/organism.md``).

Every hops question stores its ground truth in the run (``metadata``: ``hops``, ``chain``), so a measurement
made on the recorded states can be scored against what the task says each iteration could know:

- :func:`lens_by_hop`: the per-iteration lens at the answer position (generated position 0). For each question and
  iteration, whether the top token is the answer and whether it is the **hop-i value** (``chain[i]``, the value
  after ``i`` bindings), and the hop-i value's rank among the recorded top-k. A model that resolves one hop per
  iteration and shows its intermediate value through the lens puts ``chain[i]`` on top at iteration ``i``.
- :func:`answer_resolution`: the first iteration from which the answer stays on top, per hop count: the depth
  the model needed for each ``h``.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from sst_interp.kernels.errors import UsageError
from sst_interp.organism.tokenizer import hops_tokenizer
from sst_interp.store import Run

LENS_BY_HOP_COLUMNS = ("question_id", "hops", "iteration", "top_token", "top_is_answer", "top_is_hop_value",
                       "hop_value", "hop_value_rank")


def _truth(run: Run) -> pd.DataFrame:
    """question_id -> hops and chain, from the questions table; UsageError for a run of another source."""
    questions = run.questions()
    if not (questions["source"] == "hops").all():
        raise UsageError(f"{run.path} holds questions of sources {sorted(set(questions['source']))}; the hops "
                         "measurements need a run recorded with --questions hops")
    meta = questions["metadata"].map(json.loads)
    return pd.DataFrame({"question_id": questions["question_id"], "hops": meta.map(lambda m: int(m["hops"])),
                         "chain": meta.map(lambda m: list(m["chain"]))}).set_index("question_id")


def lens_by_hop(run: Run, depth: int) -> pd.DataFrame:
    """One row per (question, iteration) of ``depth``: the lens' top token at the answer position against the truth.

    Columns :data:`LENS_BY_HOP_COLUMNS`. ``hop_value`` is ``chain[iteration]`` for iterations up to the question's
    hop count, else the answer (the value a finished chain keeps); ``hop_value_rank`` is its 0-based rank among
    the recorded top-k (NaN when outside it).
    """
    truth = _truth(run)
    tokenizer = hops_tokenizer()
    rows = []
    for block in run.logits(depth):
        if block.turn != 0:
            continue
        hops, chain = int(truth.at[block.question_id, "hops"]), truth.at[block.question_id, "chain"]
        answer_id = tokenizer.convert_tokens_to_ids(chain[-1])
        for column, iteration in enumerate(block.iterations):
            value = chain[min(int(iteration), hops)]
            value_id = tokenizer.convert_tokens_to_ids(value)
            top = int(block.argmax[0, column])
            ranks = np.flatnonzero(block.top_ids[0, column] == value_id)
            rows.append((block.question_id, hops, int(iteration), tokenizer.convert_ids_to_tokens(top),
                         top == answer_id, top == value_id, value, float(ranks[0]) if ranks.size else np.nan))
    return pd.DataFrame(rows, columns=list(LENS_BY_HOP_COLUMNS))


def answer_resolution(run: Run, depth: int) -> pd.DataFrame:
    """Per hop count: questions, and the fraction whose answer is on top at each iteration of ``depth``.

    Columns ``hops``, ``questions``, then ``iteration_1`` .. ``iteration_D``.
    """
    lens = lens_by_hop(run, depth)
    table = lens.pivot_table(index="hops", columns="iteration", values="top_is_answer", aggfunc="mean")
    table.columns = [f"iteration_{i}" for i in table.columns]
    counts = lens.groupby("hops")["question_id"].nunique().rename("questions")
    return pd.concat([counts, table], axis=1).reset_index()
