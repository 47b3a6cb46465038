"""Attention per iteration (``record --attention``): what each recorded query read at each iteration, as tidy data.

The run's ``attention/`` shards hold, per (question, turn, query position, iteration, layer, head), the query's
weights over its keys (all of them, or the top-k and the mass of the rest). :func:`attention_frame` reads them as
one row per key (:meth:`sst_interp.store.Run.attention`); the measurement's table summarises each (depth, iteration,
layer, head): how peaked its attention is, and how much a top-k run left out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from sst_interp.analyses import sections
from sst_interp.analyses.measurement import Frame, Measurement

ATTENTION_DOC = {
    "question_id": "the question", "depth": "the run depth (the depth=D partition)", "turn": "model turn, from 0",
    "position": "the query: the generated position (0 = the last prompt token)",
    "iteration": "the visit of the layer at that position, from 1 (the state rows' numbering)",
    "layer": "the recorded layer (the run's layer axis)", "head": "the query head",
    "key_position": "the key's index in the row's context (prompt tokens from 0, then each token fed after them)",
    "weight": "the attention weight (float32)",
    "remaining_mass": "1 - the sum of the (query, head)'s stored weights: the mass on keys a top-k run left out",
}
SUMMARY_COLUMNS = ("depth", "iteration", "layer", "head", "queries", "max_weight_mean", "entropy_nats_mean",
                   "remaining_mass_mean")


def recorded(a: Any) -> str | None:
    """Requirement ``attention``: the run holds attention shards."""
    if "attention" not in a.run.shard_kinds:
        return ("the run recorded no attention; record it with python -m sst_interp.record --attention "
                "LAYERS[:HEADS]")
    return None


REQUIREMENTS = {"attention": recorded}


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (depth, iteration, layer, head): ``queries`` (query rows), ``max_weight_mean`` (the mean of each query's
    largest weight), ``entropy_nats_mean`` (of its stored weights, -sum w log w) and ``remaining_mass_mean``."""
    if frame.empty:
        return pd.DataFrame(columns=list(SUMMARY_COLUMNS))
    weights = frame["weight"].to_numpy(dtype=np.float64)
    query = ["question_id", "turn", "position", "depth", "iteration", "layer", "head"]
    per_query = frame.assign(plogp=np.where(weights > 0, -weights * np.log(np.where(weights > 0, weights, 1.0)), 0.0)) \
        .groupby(query, sort=True).agg(max_weight=("weight", "max"), entropy=("plogp", "sum"),
                                       remaining=("remaining_mass", "first")).reset_index()
    table = per_query.groupby(["depth", "iteration", "layer", "head"], sort=True).agg(
        queries=("max_weight", "size"), max_weight_mean=("max_weight", "mean"), entropy_nats_mean=("entropy", "mean"),
        remaining_mass_mean=("remaining", "mean")).reset_index()
    return table[list(SUMMARY_COLUMNS)]


class AttentionResult(Frame):
    """The tidy key rows (:attr:`frame`) and their summary per (depth, iteration, layer, head) as the table."""

    def table(self) -> pd.DataFrame:
        return summary(self.frame)


def attention_frame(a: Any) -> AttentionResult:
    """Every recorded attention row of the run, one per key (:meth:`sst_interp.store.Run.attention`)."""
    return AttentionResult(a.run.attention())


MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(name="attention", label="", title="Attention of each recorded query over its keys, per (iteration, "
                "layer, head): what each iteration reads.", requires=("attention",), compute=attention_frame,
                tidy=lambda result: result.frame, columns=ATTENTION_DOC, family=sections.ATTENTION,
                caption="What each iteration reads: per (depth, iteration, recorded layer, head) of the attention the "
                "run recorded (record --attention), the queries, the mean of each query's largest weight, the mean "
                "entropy of its weights (nats) and the mean mass a top-k run left out; the key by key rows are "
                "study.open(run).attention()."),
)
