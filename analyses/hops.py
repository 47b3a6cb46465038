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
import warnings

import numpy as np
import pandas as pd

from sst_interp.analyses.overlap import within_run_overlap
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.results import NotApplicable
from sst_interp.organism.tokenizer import hops_tokenizer
from sst_interp.store import Run

LENS_BY_HOP_COLUMNS = ("question_id", "hops", "iteration", "top_token", "top_is_answer", "top_is_hop_value",
                       "hop_value", "hop_value_rank")


def question_truth(run: Run) -> pd.DataFrame:
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
    truth = question_truth(run)
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


# ------------------------------------------------------------------------------------------------ linear probe
HOP_PROBE_COLUMNS = ("layer", "iteration", "hop", "questions", "classes", "accuracy", "majority")


def answer_states(run: Run, depth: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The recorded states at the answer position (generated position 0, first turn) at ``depth``.

    Returns:
        question ids ``[Q]``, the recorded layers ``[L]``, and states ``[Q, depth, L, d]`` (float32; NaN where a
        layer is not visited at an iteration).
    """
    ids, states, layers = [], [], None
    for block in run.hidden(depth, positions=[0]):
        if block.turn != 0:
            continue
        ids.append(str(block.question_id))
        values = np.full((depth, *block.values.shape[2:]), np.nan, dtype=np.float32)
        values[np.asarray(block.iterations) - 1] = block.values[0]
        states.append(values)
        layers = np.asarray(block.layers)
    if not ids:
        raise UsageError(f"{run.path} holds no state at the answer position at depth {depth}; record with "
                         "--full-positions 1 or more")
    return ids, layers, np.stack(states)


def hop_probe(run: Run, depth: int, folds: int = 5, seed: int = 0) -> pd.DataFrame:
    """Held-out decoding of every hop value from every (layer, iteration) state at the answer position.

    For each recorded layer, iteration ``i`` of ``depth`` and hop ``j`` (1 to the run's most hops), a multinomial
    logistic regression (scikit-learn) reads ``chain[j]`` from the state of the questions that have a ``j``-th
    hop. Accuracy is held out: the questions are split into ``folds`` folds as the halting probe's cross-fitting
    splits them (every ``folds``-th question in run order), and each fold is predicted by a regression fitted on
    the others. ``majority`` is the held-out accuracy of always answering the training folds' most common value
    (the floor a probe must beat). A value that only one fold holds cannot be predicted in that fold, and counts as
    a miss.

    Columns :data:`HOP_PROBE_COLUMNS`; one row per (layer, iteration, hop) with at least ``2 * folds`` questions.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    truth = question_truth(run)
    ids, layers, states = answer_states(run, depth)
    hops = truth.loc[ids, "hops"].to_numpy()
    chains = truth.loc[ids, "chain"].tolist()
    fold_of = np.arange(len(ids)) % folds
    rows = []
    for j in range(1, int(hops.max()) + 1):
        keep = np.flatnonzero(hops >= j)
        if keep.size < 2 * folds:
            continue
        labels = np.array([chains[q][j] for q in keep])
        for li, layer in enumerate(layers):
            for iteration in range(1, depth + 1):
                x = states[keep, iteration - 1, li].astype(np.float64)
                if np.isnan(x).any():
                    continue  # the layer is not visited at this iteration
                hit = majority_hit = 0
                for fold in range(folds):
                    train, test = fold_of[keep] != fold, fold_of[keep] == fold
                    scaler = StandardScaler().fit(x[train])
                    model = LogisticRegression(max_iter=500, random_state=seed)
                    with warnings.catch_warnings():
                        # the labels are token classes by construction, however many there are per question
                        warnings.filterwarnings("ignore", "The number of unique classes", UserWarning)
                        model.fit(scaler.transform(x[train]), labels[train])
                    hit += int((model.predict(scaler.transform(x[test])) == labels[test]).sum())
                    values, counts = np.unique(labels[train], return_counts=True)
                    majority_hit += int((labels[test] == values[counts.argmax()]).sum())
                rows.append((int(layer), iteration, j, int(keep.size), int(np.unique(labels).size),
                             hit / keep.size, majority_hit / keep.size))
    return pd.DataFrame(rows, columns=list(HOP_PROBE_COLUMNS))


# ------------------------------------------------------------------------------------------------ overlap
def overlap_by_hops(run: Run, depth: int, iteration_a: int, iteration_b: int, k: int | None = None
                    ) -> pd.DataFrame:
    """The top-k overlap between iterations ``iteration_a`` and ``iteration_b`` at the answer position, per question,
    with its hop count: columns ``question_id``, ``hops``, ``overlap`` (mean over the layers visited at both).

    A question whose answer is still being computed between the two iterations should move its state more (lower
    overlap) than one that was resolved before ``iteration_a``.
    """

    result = within_run_overlap(run, depth, iteration_a, iteration_b, k=k, positions=[0])
    if isinstance(result, NotApplicable):
        raise UsageError(f"no top-k overlap between iterations {iteration_a} and {iteration_b} at depth {depth}: "
                         f"{result.reason}")
    truth = question_truth(run)
    overlap = np.nanmean(result.values[:, 0, :], axis=-1)
    ids = list(result.question_ids)
    return pd.DataFrame({"question_id": ids, "hops": truth.loc[ids, "hops"].to_numpy(), "overlap": overlap})
