"""Counterfactual patching on the hops organism: at which iteration does the answer column hold hop ``j``?

For a question A (``c -> b -> a -> 7``) and a hop ``j`` of its chain, the counterfactual B is A with the ``j``-th
binding of the chain (``chain[j-1]=chain[j]``) rebound to the head of a distractor chain, so B's path leaves A's at
hop ``j`` and ends in another digit. A and B share every binding read before hop ``j``, so a model that reads one
binding after another computes the same answer-column state for both until it reads the ``j``-th binding, and
different states after.

The patch is the suite's own live ``patch`` (:mod:`sst_interp.interventions.spec`, ``source`` = B's batch row): at
iteration ``i`` the answer column's output of every visit (HRM-Text: the L and the H block) in A's row becomes B's.
The later iterations then run on A's prompt. Predictions, per (``j``, ``i``):

- if iteration ``i`` has not read hop ``j`` yet, B's state there equals A's: the answer stays A's;
- if it has, the state carries B's pointer (past the rebinding) and the later iterations follow it through the
  bindings A and B share: the answer becomes B's.

So the fraction of pairs whose answer becomes B's, against ``i``, rises at the iteration where hop ``j`` is read.
Sequential lookups at two per H-cycle predict the rise at ``i = ceil(j / 2)``; a model that doubles pointers over the
prompt's columns (those columns are not patched) predicts something else, which is the point of measuring it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pandas as pd
import torch

from sst_interp.interventions import InterventionSpec, Operation, Site
from sst_interp.interventions.loops import FAMILY_STREAM, intervene_loop
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.progress import progress
from sst_interp.kernels.stats import wilson_interval
from sst_interp.model.generation import GenerationConfig
from sst_interp.model.loop_model import LoopModel, generate_looped
from sst_interp.organism.task import BIND, SEPARATOR, HopsQuestion

PATCHING_COLUMNS = ("question", "hops", "changed_hop", "last_binding", "iteration", "answer_a", "answer_b",
                    "patched", "became_b", "stayed_a")

FLIP_COLUMNS = ("changed_hop", "iteration", "pairs", "became_b", "became_b_low", "became_b_high", "stayed_a",
                "inner_pairs", "inner_became_b", "last_pairs", "last_became_b")


@dataclass(frozen=True)
class Counterfactual:
    """A question's counterfactual for one hop.

    Args:
        prompt: B's prompt (A's with one binding's right side changed).
        answer: B's answer.
        changed_hop: the hop ``j`` whose binding was rebound.
    """

    prompt: str
    answer: str
    changed_hop: int


def counterfactual(question: HopsQuestion, hop: int, rng: random.Random) -> Counterfactual:
    """Rebind ``chain[hop-1]`` to the head of a distractor chain drawn with ``rng`` (module docstring)."""
    if not 1 <= hop <= question.hops:
        raise UsageError(f"hop {hop} is outside 1..{question.hops} of this question")
    bindings = [token.split(BIND) for token in question.prompt.split(SEPARATOR) if BIND in token]
    targets = {right for _, right in bindings}
    heads = sorted(left for left, _ in bindings if left not in targets and left not in question.chain)
    if not heads:
        raise UsageError("the question has no distractor chain to rebind to")
    head = rng.choice(heads)
    source = question.chain[hop - 1]
    tokens = [f"{source}{BIND}{head}" if token.startswith(f"{source}{BIND}") else token
              for token in question.prompt.split(SEPARATOR)]
    return Counterfactual(prompt=SEPARATOR.join(tokens), answer=question.successors[head][-1], changed_hop=hop)


def patch_spec(iteration: int) -> InterventionSpec:
    """Every visit's answer-column output at ``iteration`` becomes batch row 1's (B's)."""
    return InterventionSpec.of(Site(FAMILY_STREAM, positions=(0,), iterations=(iteration,)),
                               Operation("patch", source=1))


def answers(model: LoopModel, tokenizer, prompts: list[str], depth: int, spec: InterventionSpec | None
            ) -> list[str]:
    """Each prompt's first generated token at ``depth`` (one batch), under ``spec`` when given."""
    ids = [tokenizer(prompt)["input_ids"] for prompt in prompts]
    config = GenerationConfig(max_new_tokens=1, pad_token_id=int(tokenizer.pad_token_id))
    if spec is None:
        result = generate_looped(model, ids, depth, config)
    else:
        with intervene_loop(model, spec) as intervener:
            result = generate_looped(model, ids, depth, config, observer=intervener)
    return tokenizer.convert_ids_to_tokens([row[0] for row in result.token_ids])


@torch.no_grad()
def patch_by_iteration(model: LoopModel, tokenizer, questions: Sequence[HopsQuestion], depth: int,
                       seed: int = 0, max_pairs: int | None = None) -> pd.DataFrame:
    """For every question, every hop ``j`` of its chain and every iteration ``i`` of ``depth``: A's answer with
    the answer column patched from B at iteration ``i`` (module docstring).

    Only questions A answers correctly at ``depth`` and whose B the model answers correctly are kept (the patch's
    reading needs both clean answers right). ``max_pairs``: once a changed hop has that many kept pairs, further
    questions skip it, so a long question list spends its patches on the hops that still lack pairs (None: every
    hop of every question). ``last_binding`` marks pairs whose ``j`` is the chain's last binding: there B differs
    from A in the answer digit's own binding, which a prompt column can read directly (leakage, reported apart by
    :func:`flip_table`). Columns :data:`PATCHING_COLUMNS`.
    """
    rows = []
    with model.at_depth(depth):
        for index, question, other in kept_pairs(model, tokenizer, questions, depth, seed, max_pairs,
                                                 "hops patching"):
            for iteration in range(1, depth + 1):
                patched = answers(model, tokenizer, [question.prompt, other.prompt], depth, patch_spec(iteration))[0]
                rows.append((index, question.hops, other.changed_hop, other.changed_hop == question.hops, iteration,
                             question.answer, other.answer, patched, patched == other.answer,
                             patched == question.answer))
    return pd.DataFrame(rows, columns=list(PATCHING_COLUMNS))


def kept_pairs(model: LoopModel, tokenizer, questions: Sequence[HopsQuestion], depth: int, seed: int = 0,
               max_pairs: int | None = None, desc: str = "pairs") -> Iterator[tuple[int, HopsQuestion, Counterfactual]]:
    """(question index, A, B) for every question and hop whose A and B the model answers right at ``depth``, B
    drawn with ``random.Random(seed)`` one hop after another; once a changed hop has ``max_pairs`` kept pairs,
    further questions skip it (:func:`patch_by_iteration`). Run inside ``model.at_depth(depth)``."""
    rng = random.Random(seed)
    kept: dict[int, int] = {}
    for index, question in enumerate(progress(questions, desc=desc, unit="question")):
        for hop in range(1, question.hops + 1):
            # drawn even when skipped, so the counterfactuals of a question do not depend on max_pairs
            other = counterfactual(question, hop, rng)
            if max_pairs is not None and kept.get(hop, 0) >= max_pairs:
                continue
            if answers(model, tokenizer, [question.prompt, other.prompt], depth, None) != [question.answer,
                                                                                            other.answer]:
                continue
            kept[hop] = kept.get(hop, 0) + 1
            yield index, question, other


def flip_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (changed hop, iteration): pairs, the fraction of patched answers that became B's (with its 95% Wilson
    interval) and stayed A's; and the same split apart into pairs whose ``j`` is the chain's last binding
    (``last_*``, leakage) and the rest (``inner_*``). A split with no pairs has NaN fractions."""
    def cell(rows: pd.DataFrame) -> dict[str, float]:
        became = int(rows["became_b"].sum())
        interval = wilson_interval(became, len(rows)) if len(rows) else None
        low, high = (interval.low, interval.high) if interval else (math.nan, math.nan)
        return {"pairs": len(rows), "became_b": became / len(rows) if len(rows) else math.nan,
                "became_b_low": low, "became_b_high": high,
                "stayed_a": float(rows["stayed_a"].mean()) if len(rows) else math.nan}

    out = []
    for (hop, iteration), rows in frame.groupby(["changed_hop", "iteration"]):
        inner, last = rows[~rows["last_binding"].astype(bool)], rows[rows["last_binding"].astype(bool)]
        row = {"changed_hop": hop, "iteration": iteration, **cell(rows)}
        for name, part in (("inner", inner), ("last", last)):
            row[f"{name}_pairs"] = len(part)
            row[f"{name}_became_b"] = float(part["became_b"].mean()) if len(part) else math.nan
        out.append(row)
    return pd.DataFrame(out, columns=list(FLIP_COLUMNS))
