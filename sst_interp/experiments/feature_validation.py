"""Sparse dictionaries against the hops organism's mechanism (issue 55 item 7): rows of ``organism validate``.

Given the organism, one shared dictionary per block (trained live on every position of the train split:
``python -m sst_interp.features train --live``) and test questions, the states of each block at the answer column
are taken live (:func:`~sst_interp.features.live.live_states`; equal to a recording's exactly) and encoded:

- **features read the pointer** (:func:`pointer_row`): per (block, hop j, iteration i), for "the hop-j value is v",
  each value's best single feature and best 4 (one-vs-rest AUC, chosen on the training folds), the held-out AUC of
  the best single one, and the held-out accuracy of a logistic read-out from the chosen features (the best one or
  four per value, pooled), beside a logistic probe on the full state trained on the same folds (scikit-learn);
- **basin shifts** (:func:`basin_row`): the Jaccard distance of the active feature sets between iterations 1 and 2
  (mean over the blocks), as a score for h > 2, against the paper's top-k overlap (``analyses.overlap``, k the
  recorder's sketch k) on the same questions;
- **feature patching** (:mod:`~sst_interp.experiments.feature_patching`): the fraction of the patching staircase
  that patching only the features attribution names reproduces;
- **controls** (:func:`feature_rows` with another ``label``): the same rows with the untrained organism's states
  and dictionaries, and with dictionaries trained on dimension-shuffled states.

A row that finds nothing is a finding: the thresholds are the predictions, not tuned to pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import rankdata
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import KFold

from sst_interp.analyses.overlap import topk_overlap
from sst_interp.experiments.feature_patching import feature_patching, feature_patching_row
from sst_interp.experiments.validation_row import ValidationRow
from sst_interp.features.dictionary import Dictionary
from sst_interp.features.live import live_states
from sst_interp.features.live_train import load_organism
from sst_interp.hooks.config import default_sketch_k
from sst_interp.kernels.errors import UsageError
from sst_interp.model.loop_model import LoopModel
from sst_interp.organism.looped import encode_prompts
from sst_interp.organism.task import HopsQuestion, HopsSpec, split_items
from sst_interp.organism.tokenizer import hops_tokenizer

#: Hops resolved by one iteration (an H-cycle: the L block, then the H block).
LOOKUPS_PER_ITERATION = 2
#: Features per value in the larger read-out.
BEST = 4
#: How far below the full-state probe the best-4 read-out may sit and still "read the pointer".
PROBE_MARGIN = 0.05
#: How far above the majority value the best-4 read-out must be to read anything (a chance-level read-out matches a
#: chance-level probe, and reads no pointer).
ABOVE_MAJORITY = 0.2
POINTER_COLUMNS = ("label", "block", "hop", "iteration", "questions", "values", "majority", "best1_auc",
                   "best1_accuracy", "best4_accuracy", "probe_accuracy", "sequential")


def answer_states(model: LoopModel, questions: Sequence[HopsQuestion], depth: int, blocks: Sequence[int] = (0, 1),
                  batch: int = 256) -> dict[tuple[int, int], np.ndarray]:
    """(block, iteration) -> [N, d] float32: each block's state at the answer column (the prompt's last) at every
    iteration of ``depth``."""
    ids = encode_prompts(hops_tokenizer(), questions)
    out: dict[tuple[int, int], list[np.ndarray]] = {}
    for start in range(0, len(ids), batch):
        for block in blocks:
            for iteration, states in live_states(model, ids[start:start + batch], depth, block).items():
                out.setdefault((block, iteration), []).append(states[:, -1].numpy())
    return {key: np.concatenate(parts) for key, parts in out.items()}


def encode(dictionaries: Mapping[int, Dictionary], states: Mapping[tuple[int, int], np.ndarray]
           ) -> dict[tuple[int, int], np.ndarray]:
    """(block, iteration) -> [N, width] float32 activations of each block's dictionary."""
    return {key: dictionaries[key[0]].encode(values).cpu().numpy() for key, values in states.items()}


def feature_aucs(activations: np.ndarray, positive: np.ndarray) -> np.ndarray:
    """[F] one-vs-rest AUC of every feature (Mann-Whitney from ranks; ties at zero share their rank)."""
    ranks = rankdata(activations, axis=0)
    n_pos = int(positive.sum())
    n_neg = len(positive) - n_pos
    return (ranks[positive].sum(0) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def _readout(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray) -> np.ndarray:
    if len(np.unique(train_y)) < 2 or train_x.shape[1] == 0:
        values, counts = np.unique(train_y, return_counts=True)
        return np.full(len(test_x), values[counts.argmax()])
    model = LogisticRegression(max_iter=2000)
    return model.fit(train_x, train_y).predict(test_x)


def read_cell(activations: np.ndarray, states: np.ndarray, labels: np.ndarray, folds: int, seed: int = 0
              ) -> dict[str, float]:
    """Held-out reads of ``labels`` [N] (str) from activations [N, F] and states [N, d] (module docstring): best1_auc,
    best1_accuracy, best4_accuracy, probe_accuracy, majority."""
    hits = {"best1": 0, "best4": 0, "probe": 0, "majority": 0}
    aucs: list[float] = []
    for train, test in KFold(folds, shuffle=True, random_state=seed).split(labels):
        chosen: dict[int, set[int]] = {1: set(), BEST: set()}
        train_labels = labels[train]
        for value in np.unique(train_labels):
            positive = train_labels == value
            if positive.all():
                continue
            order = np.argsort(-feature_aucs(activations[train], positive), kind="stable")
            chosen[1].add(int(order[0]))
            chosen[BEST].update(int(f) for f in order[:BEST])
            held = labels[test] == value
            if 0 < held.sum() < len(held):
                aucs.append(float(roc_auc_score(held, activations[test, order[0]])))
        for name, size in (("best1", 1), ("best4", BEST)):
            columns = sorted(chosen[size])
            predicted = _readout(activations[train][:, columns], train_labels, activations[test][:, columns])
            hits[name] += int((predicted == labels[test]).sum())
        hits["probe"] += int((_readout(states[train], train_labels, states[test]) == labels[test]).sum())
        values, counts = np.unique(train_labels, return_counts=True)
        hits["majority"] += int((labels[test] == values[counts.argmax()]).sum())
    n = len(labels)
    return {"best1_auc": float(np.mean(aucs)) if aucs else float("nan"), "best1_accuracy": hits["best1"] / n,
            "best4_accuracy": hits["best4"] / n, "probe_accuracy": hits["probe"] / n, "majority": hits["majority"] / n}


def sequential_slot(hop: int) -> tuple[int, int]:
    """(block, iteration) where the sequential hypothesis resolves hop ``hop``: iteration ceil(j/2), the L block
    (0) for odd j and the H block (1) for even j."""
    return (hop - 1) % LOOKUPS_PER_ITERATION, -(-hop // LOOKUPS_PER_ITERATION)


def pointer_row(questions: Sequence[HopsQuestion], states: Mapping[tuple[int, int], np.ndarray],
                activations: Mapping[tuple[int, int], np.ndarray], label: str = "trained", folds: int = 5,
                min_questions: int = 20, max_hop: int | None = None) -> ValidationRow:
    """Features read the pointer (module docstring): one detail row per (block, hop, iteration) with at least
    ``min_questions`` questions that have the hop (hops up to ``max_hop``, default every one)."""
    hops = np.array([q.hops for q in questions])
    rows = []
    for (block, iteration), acts in sorted(activations.items()):
        for hop in range(1, min(int(hops.max()), max_hop or int(hops.max())) + 1):
            have = np.flatnonzero(hops >= hop)
            if len(have) < max(min_questions, folds):
                continue
            labels = np.array([questions[n].chain[hop] for n in have])
            cell = read_cell(acts[have], states[(block, iteration)][have], labels, folds)
            rows.append({"label": label, "block": "LH"[block], "hop": hop, "iteration": iteration,
                         "questions": len(have), "values": len(np.unique(labels)), **cell,
                         "sequential": sequential_slot(hop) == (block, iteration)})
    frame = pd.DataFrame(rows, columns=list(POINTER_COLUMNS))
    slots = frame[frame["sequential"]].sort_values("hop")
    gaps = slots["best4_accuracy"] - slots["probe_accuracy"]
    return ValidationRow(
        f"features read the pointer ({label} dictionaries): hop-j value from each value's best 1 / best 4 features "
        "at the answer column, held out over question folds, beside a full-state linear probe on the same folds "
        "(experiments.feature_validation)",
        f"at the sequential slot (iteration ceil(j/2), L block for odd j, H for even) the best-4 read-out reaches the "
        f"probe (within {PROBE_MARGIN}) and beats the majority value by {ABOVE_MAJORITY}",
        "; ".join(f"j={r.hop} ({r.block}, i={r.iteration}, n {r.questions}): AUC {r.best1_auc:.2f}, best1 "
                  f"{r.best1_accuracy:.2f}, best4 {r.best4_accuracy:.2f}, probe {r.probe_accuracy:.2f}, majority "
                  f"{r.majority:.2f}" for r in slots.itertuples()),
        bool(len(gaps) and (gaps >= -PROBE_MARGIN).all()
             and (slots["best4_accuracy"] >= slots["majority"] + ABOVE_MAJORITY).all()), frame)


def jaccard_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[N]: 1 - |A & B| / |A | B| of the active sets (> 0) of activations a, b [N, F]; 0 where both are empty."""
    on_a, on_b = a > 0, b > 0
    union = (on_a | on_b).sum(1)
    return np.where(union > 0, 1 - (on_a & on_b).sum(1) / np.maximum(union, 1), 0.0)


def basin_row(questions: Sequence[HopsQuestion], states: Mapping[tuple[int, int], np.ndarray],
              activations: Mapping[tuple[int, int], np.ndarray], label: str = "trained",
              blocks: Sequence[int] = (0, 1)) -> ValidationRow:
    """Basin shifts (module docstring): per question, the feature-set change and the top-k overlap between
    iterations 1 and 2 (means over ``blocks``), and their AUCs for h > 2."""
    hops = np.array([q.hops for q in questions])
    computing = hops > LOOKUPS_PER_ITERATION
    d = next(iter(states.values())).shape[1]
    k = default_sketch_k(d)
    change = np.mean([jaccard_distance(activations[(b, 1)], activations[(b, 2)]) for b in blocks], axis=0)
    overlap = np.mean([topk_overlap(states[(b, 1)], states[(b, 2)], k) for b in blocks], axis=0)
    feature_auc = float(roc_auc_score(computing, change))
    overlap_auc = float(roc_auc_score(computing, -overlap))
    frame = pd.DataFrame({"label": label, "hops": hops, "still_computing": computing, "feature_change": change,
                          "topk_overlap": overlap})
    return ValidationRow(
        f"basin shifts ({label} dictionaries): Jaccard distance of the active feature sets between iterations 1 "
        f"and 2 at the answer column, against the top-k overlap (k = {k}), as scores for h > 2",
        "the feature-set change separates h > 2 from h <= 2 better than the top-k overlap",
        f"feature change AUC {feature_auc:.3f}, top-k overlap AUC {overlap_auc:.3f}, over {len(hops)} questions "
        f"({int(computing.sum())} with h > 2)", bool(feature_auc > overlap_auc), frame)


def feature_rows(model: LoopModel, dictionaries: Mapping[int, Dictionary], questions: Sequence[HopsQuestion],
                 depth: int, label: str = "trained", folds: int = 5, max_hop: int | None = None
                 ) -> dict[str, ValidationRow]:
    """The pointer and basin rows of ``model`` with ``dictionaries`` (block -> shared dictionary) on ``questions``
    at ``depth`` (>= 2), named ``features_pointer_<label>`` and ``features_basin_<label>``; the pointer row reads
    hops up to ``max_hop`` (default every one)."""
    states = answer_states(model, questions, depth, tuple(sorted(dictionaries)))
    activations = encode(dictionaries, states)
    return {f"features_pointer_{label}": pointer_row(questions, states, activations, label, folds,
                                                     max_hop=max_hop),
            f"features_basin_{label}": basin_row(questions, states, activations, label, tuple(sorted(dictionaries)))}


#: The dictionaries' folders under ``organism validate --features``: the organism's, and the two controls.
FEATURE_LABELS = ("trained", "untrained", "shuffled")


def check_feature_folders(root: Path, depth: int) -> None:
    """Refuse (UsageError, one line) a ``--features ROOT`` whose dictionaries do not fit the run: each
    ROOT/<label>/layer<b> present must be block b's and cover iterations 1..``depth``."""
    for label in FEATURE_LABELS:
        for block in (0, 1):
            folder = root / label / f"layer{block}"
            if not folder.is_dir():
                continue
            meta = Dictionary.load(folder).meta
            if meta.layer != block or not set(range(1, depth + 1)) <= set(meta.iterations):
                raise UsageError(f"--features: {folder} is a dictionary of layer {meta.layer}, iterations "
                                 f"{list(meta.iterations)}; the run needs block {block}'s at iterations 1-{depth} "
                                 f"(train --live --layer {block} --layout shared --depth {depth})")


def organism_feature_rows(root: Path, model: str, spec: HopsSpec, depth: int, questions: int, folds: int = 5,
                          pairs: int | None = None) -> dict[str, ValidationRow]:
    """Every feature row of ``organism validate --features ROOT``: ROOT/<label>/layer<b> for each of
    :data:`FEATURE_LABELS` that is there (the untrained control runs the organism's initial weights): the pointer,
    basin and feature-patching rows (:mod:`~sst_interp.experiments.feature_patching`, ``pairs`` counterfactual
    pairs per changed hop, None: every one), named ``features_<row>_<label>``."""
    items = split_items(spec, "test", questions)
    rows: dict[str, ValidationRow] = {}
    for label in FEATURE_LABELS:
        folders = {b: root / label / f"layer{b}" for b in (0, 1)}
        if not all(folder.is_dir() for folder in folders.values()):
            continue
        dictionaries = {b: Dictionary.load(folder) for b, folder in folders.items()}
        seed = dictionaries[0].meta.seed
        loop_model, _, _ = load_organism(model, untrained=label == "untrained", seed=seed)
        rows.update(feature_rows(loop_model, dictionaries, items, depth, label, folds))
        patched = feature_patching(loop_model, hops_tokenizer(), folders, items, depth, max_pairs=pairs)
        rows[f"features_patching_{label}"] = feature_patching_row(patched, label)
    return rows
