"""The organisms' settings: the looped organism's shape and its training command's flags (no torch here, so that
``--help`` stays light)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.fields import arg
from sst_interp.organism.task import HopsSpec, vocabulary
from sst_interp.organism.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS

if TYPE_CHECKING:
    from transformers import HrmTextConfig


# HRM-Text scales token embeddings by 1 / initializer_range (50) by default, so the embedding dwarfs what the
# blocks add at initialisation; at 1 the lookup was learned in fewer steps (measured in docs/organism.md).
EMBEDDING_SCALE = 1.0


@dataclass(frozen=True)
class LoopedShape:
    """The organism's architecture (an ``HrmTextConfig``'s free fields).

    Args:
        hidden_size: d.
        intermediate_size: the MLP's width.
        num_attention_heads: heads per attention (``head_dim = hidden_size / heads``).
        layers_per_stack: blocks in each of the L and H stacks.
        L_cycles: L-stack visits per H-cycle.
        max_depth: the largest H-cycle count trained (``H_cycles`` of the saved config).
    """

    hidden_size: int = 128
    intermediate_size: int = 256
    num_attention_heads: int = 4
    layers_per_stack: int = 1
    L_cycles: int = 1
    max_depth: int = 4

    def config(self) -> HrmTextConfig:
        """The HRM-Text config of this shape, for the organism tokenizer's vocabulary."""
        from transformers import HrmTextConfig  # transformers stays off --help's path

        return HrmTextConfig(
            vocab_size=len(SPECIAL_TOKENS) + len(vocabulary()),
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.layers_per_stack,
            num_attention_heads=self.num_attention_heads,
            head_dim=self.hidden_size // self.num_attention_heads,
            max_position_embeddings=256,
            H_cycles=self.max_depth,
            L_cycles=self.L_cycles,
            # every L-cycle backpropagates (the default [2] would run the first of two L-cycles without gradient)
            L_bp_cycles=[self.L_cycles],
            prefix_lm=False,
            embedding_scale=EMBEDDING_SCALE,
            tie_word_embeddings=False,
            pad_token_id=PAD_ID,
            bos_token_id=BOS_ID,
            eos_token_id=EOS_ID,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )



@dataclass(frozen=True)
class LoopedTrainConfig:
    """``python -m sst_interp.organism train``: every flag, with the shipped organism's recipe as defaults."""

    out: Path = arg(help="folder to write the organism into (created; an existing folder resumes its own run)")
    steps: int = arg(3000, help="optimiser steps")
    batch_size: int = arg(64, help="questions per step")
    learning_rate: float = arg(1e-3, help="AdamW learning rate (constant after a linear warm-up)")
    warmup_steps: int = arg(100, help="linear warm-up steps")
    weight_decay: float = arg(0.01, help="AdamW weight decay")
    max_depth: int = arg(LoopedShape.max_depth, help="largest loop count (H-cycles) sampled per batch, uniformly "
                                                     "from 1")
    hidden_size: int = arg(LoopedShape.hidden_size, help="d of the organism")
    bindings: int = arg(HopsSpec.bindings, help="bindings per question")
    max_hops: int = arg(HopsSpec.max_hops, help="most hops of a question (hop counts are balanced 1..max)")
    chains: int = arg(HopsSpec.chains, help="chains per question (chance is 1/chains)")
    seed: int = arg(0, help="seed of the weights, the depth draws and the task")
    test_size: int = arg(480, help="test questions for the depth-by-hop table")
    follow_ups: int = arg(4, help="extra queries per training sequence, over the same bindings (each a supervised "
                                  "lookup; a recorded prompt asks one)")
    start_hops: int = arg(2, help="the curriculum's first hop ceiling (questions of 1..this many hops at first)")
    curriculum_accuracy: float = arg(0.9, help="raise the hop ceiling by one when the running accuracy at the "
                                                "deepest loop count reaches this (1 or more: all hops from the start)")
    factored_embeddings: bool = arg(True, help="train each binding's embedding as a free row plus its sides' "
                                               "shared factors (folded into a plain embedding when saved)")
    checkpoint_every: int = arg(200, help="steps between resumable saves")
    threads: int | None = arg(None, help="torch threads (default: torch's own)")

    def spec(self) -> HopsSpec:
        """The task spec (bad combinations are a UsageError)."""
        return HopsSpec(bindings=self.bindings, max_hops=self.max_hops, chains=self.chains, seed=self.seed)

    def shape(self) -> LoopedShape:
        """The architecture."""
        if self.hidden_size < 8 or self.hidden_size % LoopedShape.num_attention_heads:
            raise UsageError(f"--hidden-size {self.hidden_size}: give a multiple of "
                             f"{LoopedShape.num_attention_heads} of at least 8")
        return LoopedShape(hidden_size=self.hidden_size, intermediate_size=2 * self.hidden_size,
                           max_depth=self.max_depth)

    def recorded(self) -> dict[str, object]:
        """The settings that decide the weights (what ``organism.json`` keeps, and a resume must match)."""
        return {key: value for key, value in asdict(self).items() if key not in ("out", "threads", "checkpoint_every")}

    def check(self) -> None:
        """Refuse values that cannot train (UsageError), before anything is written."""
        for name in ("steps", "batch_size", "max_depth", "test_size", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if not self.learning_rate > 0:
            raise UsageError(f"--learning-rate must be positive, got {self.learning_rate}")
        spec = self.spec()
        if not spec.min_hops <= self.start_hops <= spec.max_hops:
            raise UsageError(f"--start-hops {self.start_hops} is outside 1..--max-hops ({spec.max_hops})")
        self.shape()


@dataclass(frozen=True)
class ValidateConfig:
    """``python -m sst_interp.organism validate``: every measurement on a recorded organism run against the task."""

    run: Path = arg(help="a run recorded from the organism with --questions hops at depths 1..D (flat)")
    out: Path = arg(help="folder for validation.md and one CSV per row (created; existing files are replaced)")
    model: str = arg("hops-organism", help="the organism the run was recorded from (a folder, or hops-organism)")
    patch_questions: int = arg(60, help="test questions of the counterfactual patching (each: every hop, every "
                                        "iteration)")
    folds: int = arg(5, help="question folds of the held-out hop-value probe")
    seed: int = arg(0, help="seed of the counterfactuals' distractor choice")

    def check(self) -> None:
        """Refuse values that cannot run (UsageError), before anything loads."""
        if not (self.run / "manifest.json").is_file():
            raise UsageError(f"--run {self.run} is not a run directory (no manifest.json); record one with "
                             "python -m sst_interp.record --model hops-organism --questions hops --depths 1,2,3,4")
        if self.patch_questions < 1 or self.folds < 2:
            raise UsageError("--patch-questions must be at least 1 and --folds at least 2")
