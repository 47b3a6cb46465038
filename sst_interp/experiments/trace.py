"""Experiment b, causal tracing across depths: which (layer, position) of depth k carries its answer into depth 1.

1. The clean run of the questions at depths 1 and k is recorded (an ordinary run, ``runs/clean``).
2. Per question, the *target* is the first generated position T of turn 0 where the depth-k tokens differ from the
   depth-1 tokens, and the target token is depth k's token there (questions whose traces agree on the first
   ``positions`` tokens have no target and are counted as such). Positions 0..T-1 hold the same tokens at both
   depths, so the two runs' passes at positions 0..T line up. With ``target_position`` P set, the target is depth
   k's token at P instead, for the questions whose tokens agree before P (a model whose extra iterations rarely
   change a token still changes its log-probs).
3. Every measurement is a depth-1 pass of the question in which the tokens of positions < T are forced to the
   shared ones (a patch cannot change the context the target is read in; only the model's states differ), reading
   the log-probability of the target token at position T. Without a patch this is ``logprob_depth1``; the same
   forced pass at depth k gives ``logprob_depthk``; their difference is the total effect.
4. **Layer x position**: for each layer l and position p <= T, depth k's last-iteration ``layer_out`` at (l, p),
   read from the recorded clean run, replaces the depth-1 pass's at (l, p) (iteration 1). The indirect effect is
   the patched log-prob minus ``logprob_depth1``. **Layer x iteration** at position 0: the same with depth k's
   iteration i (1..k) at position 0.

The patched passes are measured in-process (hundreds of short forced passes, not recorded as runs); the patch
states come from the recorded clean run, so they are what ``record`` stored (float32: exact; bfloat16: one
rounding). Batches are those of the recording (``batch_size`` consecutive questions), so the depth-1 passes see the
same padding as the recorded ones.

On a natively looping family (:mod:`sst_interp.experiments.families`), depth k's state of a layer is read at the
layer's own last visit (Inkling-2 Loop's layers outside the loop: iteration 1), the layer x iteration map holds the
iterations the family visits, and the forced passes are the family's own forward calls.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from sst_interp.codeact.format import encode_with_actions
from sst_interp.experiments import manifest as files
from sst_interp.experiments.configs import TraceConfig
from sst_interp.experiments.families import forced_generation, visited_iterations
from sst_interp.experiments.setup import Setup, generation_config, record_condition
from sst_interp.experiments.tables import (
    TRACE_EFFECTS,
    TRACE_LAYER_ITERATION,
    TRACE_LAYER_OFFSET,
    TRACE_LAYER_OFFSET_RESAMPLED,
    TRACE_LAYER_POSITION,
    TRACE_TARGETS,
)
from sst_interp.experiments.trace_cells import aligned_cells
from sst_interp.interventions import Intervention, InterventionSpec, Operation, Site, intervene
from sst_interp.kernels.outcomes import NEVER, first_divergence
from sst_interp.kernels.progress import progress
from sst_interp.model.depth_policy import FixedDepth
from sst_interp.model.generation import GenerationSession
from sst_interp.model.observers import ObserverGroup
from sst_interp.record.identity import episode_config
from sst_interp.store import Run

EFFECTS, LAYER_POSITION, LAYER_ITERATION, TARGETS = (TRACE_EFFECTS, TRACE_LAYER_POSITION, TRACE_LAYER_ITERATION,
                                                     TRACE_TARGETS)


@dataclass(frozen=True)
class Target:
    """One question's target: the first position where depth k's turn-0 tokens differ from depth 1's."""

    question_id: str
    position: int
    token: int
    prefix: tuple[int, ...]  # the shared tokens of positions 0..position-1


def find_targets(clean: Any, depth: int, positions: int,
                 fixed: int | None = None) -> tuple[dict[str, Target], dict[str, str]]:
    """({question: Target}, {question: why it has none}) from a clean run holding depths 1 and ``depth``; ``fixed``
    is the target position (None: the first difference)."""

    rows = clean.generations()
    rows = rows[rows["turn"] == 0]
    tokens = {(q, int(d)): list(t) for q, d, t in zip(rows["question_id"], rows["depth"], rows["token_ids"])}
    targets, skipped = {}, {}
    for question in pd.unique(rows["question_id"]):
        if (question, 1) not in tokens or (question, depth) not in tokens:
            skipped[question] = "not recorded at both depths"
            continue
        shallow, deep = tokens[(question, 1)], tokens[(question, depth)]
        where = first_divergence(shallow, deep)
        if fixed is not None:
            if where != NEVER and where < fixed:
                skipped[question] = f"tokens differ at position {where}, before --target-position {fixed}"
            elif len(deep) <= fixed:
                skipped[question] = f"fewer than {fixed + 1} tokens"
            else:
                targets[question] = Target(question, fixed, int(deep[fixed]), tuple(int(t) for t in deep[:fixed]))
        elif where == NEVER or where >= len(deep):
            skipped[question] = "same tokens at both depths"
        elif where >= positions:
            skipped[question] = f"first difference at position {where} >= --positions {positions}"
        else:
            targets[question] = Target(question, int(where), int(deep[where]), tuple(int(t) for t in deep[:where]))
    return targets, skipped


def patch_spec(run: Path, depth: int, layer: int, position: int, source_iteration: int,
               resampled: bool = False) -> InterventionSpec:
    """Depth ``depth``'s ``layer_out`` at (layer, position, ``source_iteration``), read from ``run``, replacing
    iteration 1's at (turn 0, position, layer); ``resampled``: another question's (``resample``, seed 0)."""
    site = Site("layer_out", layers=(layer,), positions=(position,), iterations=(1,), turns=(0,))
    operation = Operation("resample" if resampled else "patch", run=str(run), depth=depth,
                          source_iteration=source_iteration, seed=0 if resampled else None)
    return InterventionSpec((Intervention(site, operation),))


def run_trace(setup: Setup, out: Path, config: TraceConfig) -> dict[str, pd.DataFrame]:
    """Record the clean run, measure both maps, write the tables and ``experiment-<kind>.json`` under ``out``.

    Returns:
        {``trace_effects``: one row per (question, map, layer, position, iteration) measured;
        ``trace_layer_position``, ``trace_layer_iteration``: their means per cell with the number of questions;
        ``trace_layer_offset``: the layer x position map aligned to each question's target, with n, SEs, the
        total effect, the sign test and its Holm adjustment per cell
        (:func:`~sst_interp.experiments.trace_cells.aligned_cells`);
        ``trace_targets``: one row per question (target, the two log-probs, or why it has none)}.
    """
    config.check(setup.num_layers, setup.base.full_positions)
    k = config.depth
    layers = config.layers if config.layers is not None else tuple(range(setup.num_layers))
    clean_path = record_condition(setup, out, "clean", [1, k])

    targets, skipped = find_targets(Run.open(clean_path), k, config.positions, config.target_position)
    measure = _Measure(setup, targets)
    base1, basek = measure(1, None, 0), measure(k, None, 0)
    effects = []
    # depth k's last iteration of each layer, and the earlier ones: k and 1..k-1 for an SST; a family's layer
    # outside its loop has iteration 1 only (families.visited_iterations)

    visited = visited_iterations(setup.sst, k)
    cells = [("layer_position", layer, position, visited[layer][-1]) for position in range(config.positions)
             for layer in layers]
    cells += [("layer_iteration", layer, 0, iteration) for iteration in range(1, k) for layer in layers
              if iteration in visited[layer][:-1]]
    print(f"[trace: {len(targets)} of {len(targets) + len(skipped)} questions have a target; {len(cells)} patched "
          f"cells]")
    if config.resample_control:
        cells += [("layer_position_resampled", layer, position, visited[layer][-1])
                  for position in range(config.positions) for layer in layers]
    for kind, layer, position, iteration in progress(cells, unit="cell", desc="trace", disable=not targets):
        spec = patch_spec(clean_path, k, layer, position, iteration, resampled=kind.endswith("resampled"))
        patched = measure(1, spec, position)
        effects += [{"question_id": q, "map": kind, "layer": layer, "position": position, "iteration": iteration,
                     "indirect_effect": v - base1[q]} for q, v in patched.items()]
    frame = pd.DataFrame(effects, columns=["question_id", "map", "layer", "position", "iteration", "indirect_effect"])
    # the layer x iteration map's last iteration is the layer x position map's position-0 column
    last = frame[(frame["map"] == "layer_position") & (frame["position"] == 0)].assign(map="layer_iteration")
    by_position = _cells(frame[frame["map"] == "layer_position"], ["layer", "position"])
    by_iteration = _cells(pd.concat([frame[frame["map"] == "layer_iteration"], last]), ["layer", "iteration"])
    target_rows = [{"question_id": q, "target_position": t.position, "target_token": t.token,
                    "logprob_depth1": base1[q], "logprob_depthk": basek[q], "total_effect": basek[q] - base1[q],
                    "skipped": ""} for q, t in targets.items()]
    target_rows += [{"question_id": q, "target_position": -1, "target_token": -1, "logprob_depth1": np.nan,
                     "logprob_depthk": np.nan, "total_effect": np.nan, "skipped": why} for q, why in skipped.items()]

    target_frame = pd.DataFrame(target_rows)
    tables = {EFFECTS: frame, LAYER_POSITION: by_position, LAYER_ITERATION: by_iteration, TARGETS: target_frame,
              TRACE_LAYER_OFFSET: aligned_cells(frame, target_frame[target_frame["skipped"] == ""])}
    if config.resample_control:
        tables[TRACE_LAYER_OFFSET_RESAMPLED] = aligned_cells(frame, target_frame[target_frame["skipped"] == ""],
                                                             "layer_position_resampled")
    written = {name: files.write_table(out, name, table) for name, table in tables.items()}
    conditions = {"clean": files.condition_entry(out, clean_path, None)}
    files.write_manifest(out, "trace", config, setup.base, conditions, written)
    return tables


def _cells(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Mean indirect effect per cell, with its question count and standard error."""
    grouped = frame.groupby(keys)["indirect_effect"]
    cells = grouped.agg(["mean", "count", "sem"]).reset_index()
    return cells.rename(columns={"mean": "indirect_effect_mean", "count": "n_questions",
                                 "sem": "indirect_effect_sem"}).sort_values(keys, kind="stable").reset_index(drop=True)


class _Measure:
    """Forced passes over the recording's batches, reading each target's log-prob (see the module docstring)."""

    def __init__(self, setup: Setup, targets: dict[str, Target]) -> None:
        self.setup = setup
        self.targets = targets
        size = setup.base.batch_size
        self.batches = [setup.questions[i: i + size] for i in range(0, len(setup.questions), size)]
        self.prompts = {q.question_id: prompt_ids(setup, q) for q in setup.questions}

    def __call__(self, depth: int, spec: InterventionSpec | None, from_position: int) -> dict[str, float]:
        """{question: log-prob of its target token} for the questions whose target is at ``from_position`` or
        later (the only ones a patch at ``from_position`` can reach); ``spec`` patches only those rows."""
        out: dict[str, float] = {}
        for batch in self.batches:
            wanted = [self.targets.get(q.question_id) for q in batch]
            wanted = [t if t is not None and t.position >= from_position else None for t in wanted]
            if all(t is None for t in wanted):
                continue
            values = forced_logprobs(self.setup, [self.prompts[q.question_id] for q in batch], wanted, depth, spec)
            out.update({t.question_id: v for t, v in zip(wanted, values) if t is not None})
        return out


def prompt_ids(setup: Setup, question: Any) -> list[int]:
    """The prompt token ids ``record`` generates from (CodeACT first turns map action strings to their ids)."""
    if setup.base.codeact:
        return list(encode_with_actions(question.prompt, setup.tokenizer,
                                        episode_config(setup.base).fmt.action_tokens)[0])
    return list(setup.tokenizer(question.prompt).input_ids)


def forced_logprobs(setup: Setup, prompts: list[list[int]], targets: list[Target | None], depth: int,
                    spec: InterventionSpec | None) -> list[float]:
    """One forced generation of a batch: tokens before each row's target are its shared prefix; returns the
    natural log-prob of each row's target token at its position (NaN for rows without a target)."""
    class Forced(GenerationSession):
        def record_token(self, position: int, token: torch.Tensor, counts: list[int] | None = None) -> None:
            token = token.clone()
            for row, target in enumerate(targets):
                if target is not None and position < target.position:
                    token[row] = target.prefix[position]
            super().record_token(position, token, counts)

    capture = _TargetCapture(targets, depth)
    longest = max(t.position for t in targets if t is not None) + 1
    config = dataclasses.replace(generation_config(setup),
                                 max_new_tokens=longest, stop_strings=())
    ids = [t.question_id if t is not None else None for t in targets]
    if setup.family is not None:  # one forward call per token, the spec through the family's visit hooks
        forced_generation(setup.sst, prompts, targets, depth, config, capture, spec, ids)
        return capture.values
    with torch.no_grad():
        if spec is None:
            with Forced(setup.sst, prompts, FixedDepth(depth), config, capture) as session:
                session.run_turn()
        else:
            with intervene(setup.sst, spec, ids) as intervener, \
                    Forced(setup.sst, prompts, FixedDepth(depth), config, ObserverGroup(intervener, capture)) as s:
                s.run_turn()
    return capture.values


class _TargetCapture:
    """Observer: the log-prob of each row's target token at its position, final iteration."""

    def __init__(self, targets: list[Target | None], depth: int) -> None:
        self.targets = targets
        self.depth = depth
        self.values = [float("nan")] * len(targets)

    def on_pass_start(self, info: Any) -> None:
        """Observer: nothing to do."""

    def on_token(self, position: int, token_ids: Any, active: Any) -> None:
        """Observer: nothing to do."""

    def on_pass_end(self, info: Any, logits: Any) -> None:
        """Observer: at the final iteration of a target's position, keep log_softmax(logits)[target]."""
        if info.position is None or logits is None or info.iteration != self.depth:
            return
        for row, target in enumerate(self.targets):
            if target is not None and target.position == info.position:
                logprobs = torch.log_softmax(logits[row].double(), dim=-1)
                self.values[row] = float(logprobs[target.token])
