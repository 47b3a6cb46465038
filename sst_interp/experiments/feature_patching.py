"""Feature patching of the hops staircase (issue 55 item 7): does patching only the features attribution names, from
the counterfactual prompt, move the answer as patching the whole answer-column state does?

The pairs are the staircase's (:mod:`sst_interp.experiments.hops_patching`): A, and B with A's ``j``-th binding
rebound, both answered right. At each iteration ``i`` four patches of A's answer column from B's (batch row 1) are
run, each at both blocks' visits of iteration ``i`` (the L and the H block, as the staircase patches them):

- **full**: the whole state (the staircase itself, :func:`~sst_interp.experiments.hops_patching.patch_spec`);
- **attributed**: per block, the ``top`` features with the largest positive first-order estimate of the change in
  M = logit(B's answer) - logit(A's answer) (feature-level attribution patching: :math:`(a'_f - a_f)\\, W_{dec}[f]
  \\cdot dM/dx`, one forward and one backward pass per pair with A's context forced, gradients from
  :func:`~sst_interp.experiments.attribution.attribution_pass`), patched with the ``feature`` operation
  (:mod:`~sst_interp.interventions.feature_edits`: A's state moves by the change of those features alone and keeps
  the rest, reconstruction error included);
- **all features**: every feature whose activation differs between the prompts (patching the others changes
  nothing), so A's reconstruction becomes B's and A's error stays: what the dictionary can carry at all;
- **random**: as many features per block as ``attributed`` patched, drawn uniformly from those whose activation
  differs between the prompts (the control for "any few features that changed would do").

A patch "flips" a pair when A's answer becomes B's. Which features attribution names is kept per pair, with both
answers, so that :func:`value_specificity` can ask whether they are the features of an answer value. The row's number is the fraction of the staircase reproduced:
among the (pair, iteration) cells where the full patch flips, the fraction where the attributed patch flips too;
and, apart, the cells where it flips while the full patch does not (over-reach). A row that reproduces little is a
finding: the thresholds below are predictions, not tuned to pass.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from sst_interp.experiments.attribution import attribution_pass
from sst_interp.experiments.hops_patching import answers, kept_pairs, patch_spec
from sst_interp.experiments.trace import Target
from sst_interp.experiments.validation_row import ValidationRow
from sst_interp.interventions import Intervention, InterventionSpec, Operation, Site
from sst_interp.interventions.feature_edits import FeatureDictionary
from sst_interp.interventions.loops import FAMILY_STREAM
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.stats import wilson_interval
from sst_interp.model.generation import GenerationConfig
from sst_interp.model.loop_model import LoopModel
from sst_interp.organism.task import HopsQuestion

#: Features per block the attributed patch takes (the feature-validation rows read a value from its best 4 too).
TOP_FEATURES = 4
#: The patches of each (pair, iteration), in the columns' order.
PATCHES = ("full", "attributed", "all_features", "random")
FEATURE_PATCHING_COLUMNS = ("question", "hops", "changed_hop", "last_binding", "iteration", "answer_a", "answer_b",
                            *PATCHES, "attributed_features", "changed_features")
SPECIFICITY_COLUMNS = ("iteration", "pairs", "selections", "values", "purity", "chance", "chance_sd")
FEATURE_PATCHING_TABLE = ("changed_hop", "iteration", "pairs", "full", "attributed", "attributed_low",
                          "attributed_high", "all_features", "random")
#: Predictions: the attributed features reproduce at least this fraction of the staircase's flips ...
REPRODUCED = 0.5
#: ... and at least this much more of it than as many random changed features.
ABOVE_RANDOM = 0.25


def feature_site_spec(folders: Mapping[int, Path], features: Mapping[int, Sequence[int]], iteration: int
                      ) -> InterventionSpec:
    """Patch ``features[b]`` of block ``b``'s dictionary (``folders[b]``) at the answer column (position 0, turn 0)
    at ``iteration``, from batch row 1; blocks with no feature are left alone."""
    return InterventionSpec(tuple(
        Intervention(Site(FAMILY_STREAM, layers=(block,), positions=(0,), iterations=(iteration,), turns=(0,)),
                     Operation("feature", dictionary=str(folders[block]), features=tuple(chosen), mode="patch",
                               source=1))
        for block, chosen in sorted(features.items()) if chosen))


def _flips(model: LoopModel, tokenizer, prompts: list[str], depth: int, spec: InterventionSpec, answer_b: str
           ) -> bool:
    if not spec.interventions:
        return False  # nothing chosen to patch: A's own run, whose answer is A's
    return answers(model, tokenizer, prompts, depth, spec)[0] == answer_b


def feature_patching(model: LoopModel, tokenizer, folders: Mapping[int, str | Path],
                     questions: Sequence[HopsQuestion], depth: int, top: int = TOP_FEATURES, seed: int = 0,
                     max_pairs: int | None = None) -> pd.DataFrame:
    """Per kept pair and iteration of ``depth``: whether each of :data:`PATCHES` flips A's answer to B's (module
    docstring).

    Args:
        model: the organism (a LoopModel; float weights).
        tokenizer: its tokenizer.
        folders: block -> its dictionary's folder (a shared dictionary covering iterations 1..depth).
        questions: the A questions (their counterfactuals are drawn with ``seed``, as the staircase's are).
        depth: iterations per position.
        top: attributed features per block.
        seed: the counterfactuals' and the random control's seed.
        max_pairs: kept pairs per changed hop (None: every one).

    Returns:
        :data:`FEATURE_PATCHING_COLUMNS`, one row per (pair, iteration); ``attributed_features`` lists the patched
        features as ``block:feature`` strings, ``changed_features`` counts the features (both blocks) whose activation
        differs between the prompts (what ``all_features`` patches and ``random`` draws from).
    """
    folders = {int(block): Path(folder) for block, folder in folders.items()}
    dictionaries = {block: FeatureDictionary.load(folder) for block, folder in folders.items()}
    for block, dictionary in dictionaries.items():
        if dictionary.layer != block or not set(range(1, depth + 1)) <= set(dictionary.iterations):
            raise UsageError(f"feature patching: the dictionary {dictionary.path} covers layer {dictionary.layer}, "
                             f"iterations {list(dictionary.iterations)}; block {block} needs one trained there at "
                             f"iterations 1-{depth} (train --layout shared --depth {depth})")
    draw = random.Random(seed + 1)
    config = GenerationConfig(max_new_tokens=1, pad_token_id=int(tokenizer.pad_token_id))
    rows = []
    with model.at_depth(depth):
        for index, question, other in kept_pairs(model, tokenizer, questions, depth, seed, max_pairs,
                                                 "feature patching"):
            prompts = [question.prompt, other.prompt]
            ids = [tokenizer(prompt)["input_ids"] for prompt in prompts]
            answer_a, answer_b = tokenizer.convert_tokens_to_ids([question.answer, other.answer])
            target = Target("A", 0, int(answer_b), ())  # M at the answer column: logit(B's) - logit(A's)
            with torch.enable_grad():
                gradients = attribution_pass(model, ids, [target, target], depth, config, question_ids=["A", "B"],
                                             layers=sorted(folders), foils=[int(answer_a)] * 2)
            for iteration in range(1, depth + 1):
                chosen, changed = _choose(dictionaries, gradients, iteration, top)
                random_pick = {block: draw.sample(pool, min(len(chosen[block]), len(pool)))
                               for block, pool in changed.items()}
                flips = {
                    "full": answers(model, tokenizer, prompts, depth, patch_spec(iteration))[0] == other.answer,
                    "attributed": _flips(model, tokenizer, prompts, depth,
                                         feature_site_spec(folders, chosen, iteration), other.answer),
                    "all_features": _flips(model, tokenizer, prompts, depth,
                                           feature_site_spec(folders, changed, iteration), other.answer),
                    "random": _flips(model, tokenizer, prompts, depth,
                                     feature_site_spec(folders, random_pick, iteration), other.answer)}
                rows.append((index, question.hops, other.changed_hop, other.changed_hop == question.hops, iteration,
                             question.answer, other.answer, *(flips[name] for name in PATCHES),
                             " ".join(f"{block}:{f}" for block, features in sorted(chosen.items()) for f in features),
                             sum(len(pool) for pool in changed.values())))
    return pd.DataFrame(rows, columns=list(FEATURE_PATCHING_COLUMNS))


def _choose(dictionaries: Mapping[int, FeatureDictionary], gradients, iteration: int, top: int
            ) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Per block: the ``top`` features with the largest positive estimate, and every feature whose activation
    differs between A (row 0) and B (row 1) at the answer column at ``iteration``."""
    chosen, changed = {}, {}
    for block, dictionary in dictionaries.items():
        key = (0, iteration, block)
        activations = dictionary.encode(gradients.states[key].float()).double()
        change = activations[1] - activations[0]
        moved = change.nonzero()[:, 0]
        directions = dictionary.directions(tuple(moved.tolist()), torch.device("cpu")).double()
        estimates = change[moved] * (directions @ gradients.grads[key][0])
        order = torch.argsort(estimates, descending=True, stable=True)
        chosen[block] = [int(moved[o]) for o in order[:top] if estimates[o] > 0]
        changed[block] = moved.tolist()
    return chosen, changed


def feature_patching_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (changed hop, iteration): pairs, and the fraction of pairs each patch flips (the attributed one with its
    95% Wilson interval). Columns :data:`FEATURE_PATCHING_TABLE`."""
    out = []
    for (hop, iteration), rows in frame.groupby(["changed_hop", "iteration"]):
        flipped = int(rows["attributed"].sum())
        interval = wilson_interval(flipped, len(rows))
        out.append({"changed_hop": hop, "iteration": iteration, "pairs": len(rows),
                    **{name: float(rows[name].mean()) for name in PATCHES},
                    "attributed_low": interval.low, "attributed_high": interval.high})
    return pd.DataFrame(out, columns=list(FEATURE_PATCHING_TABLE))


def reproduced(frame: pd.DataFrame, patch: str) -> tuple[float, int, float]:
    """(fraction of the full patch's flips that ``patch`` also flips, how many the full patch flips, fraction of
    the cells the full patch leaves that ``patch`` flips)."""
    full = frame["full"].astype(bool)
    flipped = frame[patch].astype(bool)
    staircase = int(full.sum())
    caught = float((flipped & full).sum() / staircase) if staircase else float("nan")
    over = float((flipped & ~full).sum() / (~full).sum()) if (~full).any() else float("nan")
    return caught, staircase, over


def value_specificity(frame: pd.DataFrame, by: str = "answer_b", permutations: int = 200, seed: int = 0
                      ) -> pd.DataFrame:
    """How much the attributed features depend on an answer value, per iteration: the *purity*, the share of all
    attributed selections that fall on each feature's most common value of column ``by`` (1: every feature is
    named for pairs of one value only), beside its mean and standard deviation over ``permutations`` shuffles of
    ``by`` across the iteration's pairs (the purity that the features' counts alone give). Columns
    :data:`SPECIFICITY_COLUMNS`."""
    rng = np.random.default_rng(seed)
    out = []
    for iteration, rows in frame.groupby("iteration"):
        features = [str(listed).split() if isinstance(listed, str) else [] for listed in rows["attributed_features"]]
        values = rows[by].to_numpy()
        selections = sum(len(named) for named in features)

        def purity(labels: np.ndarray) -> float:
            counts: dict[str, Counter] = {}
            for named, label in zip(features, labels):
                for feature in named:
                    counts.setdefault(feature, Counter())[label] += 1
            return sum(max(c.values()) for c in counts.values()) / selections if selections else float("nan")

        shuffled = [purity(rng.permutation(values)) for _ in range(permutations)]
        out.append({"iteration": iteration, "pairs": len(rows), "selections": selections,
                    "values": len(np.unique(values)), "purity": purity(values), "chance": float(np.mean(shuffled)),
                    "chance_sd": float(np.std(shuffled))})
    return pd.DataFrame(out, columns=list(SPECIFICITY_COLUMNS))


def feature_patching_row(frame: pd.DataFrame, label: str = "trained", top: int = TOP_FEATURES) -> ValidationRow:
    """The validation row of :func:`feature_patching`'s frame: the fraction of the staircase each patch reproduces
    (module docstring); its detail is the frame itself with ``label`` first (:func:`feature_patching_table` tallies
    it per cell)."""
    caught = {name: reproduced(frame, name) for name in PATCHES[1:]}
    staircase = caught["attributed"][1]
    detail = frame.copy()
    detail.insert(0, "label", label)
    pairs = frame[["question", "changed_hop"]].drop_duplicates().shape[0] if len(frame) else 0
    if staircase:
        found = (f"{pairs} pairs, {staircase} (pair, iteration) cells flipped by the full patch: attributed "
                 f"{top} per block reproduce {caught['attributed'][0]:.2f} (over-reach {caught['attributed'][2]:.2f}), "
                 f"all changed features (mean {frame['changed_features'].mean():.1f} per cell, both blocks) "
                 f"{caught['all_features'][0]:.2f}, as many random changed features "
                 f"{caught['random'][0]:.2f} (over-reach {caught['random'][2]:.2f}); purity of the attributed "
                 f"features by B's answer at i = 1..{int(frame['iteration'].max())}: "
                 + ", ".join(f"{r.purity:.2f} (shuffled {r.chance:.2f})"
                             for r in value_specificity(frame).itertuples()))
        passed = bool(caught["attributed"][0] >= REPRODUCED
                      and caught["attributed"][0] >= caught["random"][0] + ABOVE_RANDOM)
    else:
        found = f"{pairs} pairs: the full patch flips no cell (the model answers too few A and B right), no staircase"
        passed = False
    return ValidationRow(
        f"feature patching ({label} dictionaries): at each iteration, patch from the counterfactual only the {top} "
        f"features per block that attribution names (largest positive estimate of the change in logit(B) - "
        f"logit(A)), beside all changed features and as many random changed ones "
        f"(experiments.feature_patching)",
        f"the attributed features reproduce at least {REPRODUCED} of the staircase's flips, and at least "
        f"{ABOVE_RANDOM} more than random ones",
        found, passed, detail)

