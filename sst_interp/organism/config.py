"""The organisms' settings: the looped organism's shape, the one-pass backbone's shape, and the training commands'
flags (no torch here, so that ``--help`` stays light)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.fields import arg, setting
from sst_interp.organism.task import HopsSpec, vocabulary
from sst_interp.organism.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS

if TYPE_CHECKING:
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, HrmTextConfig, HrmTextForCausalLM


# HRM-Text scales token embeddings by 1 / initializer_range (50) by default, so the embedding dwarfs what the
# blocks add at initialisation; at 1 the lookup was learned in fewer steps (measured in docs/organism.md).
EMBEDDING_SCALE = 1.0
#: Counterfactual pairs each (changed hop, iteration) cell of the validation's patching staircase rests on: with 19
#: and 9 pairs the 5- and 6-hop rows misread (j=5, i=3) as 0.84; 1,947 pairs give 0.72 +- 0.03.
PATCH_PAIRS = 40


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

    def build(self) -> HrmTextForCausalLM:
        """A randomly initialised organism of this shape."""
        from transformers import HrmTextForCausalLM

        return HrmTextForCausalLM(self.config())


@dataclass(frozen=True)
class OnePassShape:
    """The SST organism's backbone: transformers' own Gemma 3 text model (the family the SST wraps, as in the paper),
    one pass per token, as many blocks as one H-cycle of the looped organism.

    Args:
        hidden_size: d.
        intermediate_size: the MLP's width.
        num_attention_heads: heads per attention (as many KV heads; ``head_dim = hidden_size / heads``).
        num_layers: decoder layers.
    """

    hidden_size: int = LoopedShape.hidden_size
    intermediate_size: int = LoopedShape.intermediate_size
    num_attention_heads: int = LoopedShape.num_attention_heads
    num_layers: int = 2
    max_depth: int = 1  # one pass: what the training loop samples its loop count up to

    def config(self) -> Gemma3TextConfig:
        """The Gemma 3 text config of this shape, for the organism tokenizer's vocabulary: every layer full attention
        (a prompt is far shorter than any window), untied head (as the looped organism's)."""
        from transformers import Gemma3TextConfig

        head_dim = self.hidden_size // self.num_attention_heads
        rope = {"rope_type": "default", "rope_theta": 10000.0}
        return Gemma3TextConfig(
            vocab_size=len(SPECIAL_TOKENS) + len(vocabulary()),
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_attention_heads,
            head_dim=head_dim,
            query_pre_attn_scalar=head_dim,
            layer_types=["full_attention"] * self.num_layers,
            sliding_window=256,
            max_position_embeddings=256,
            rope_parameters={"full_attention": dict(rope), "sliding_attention": dict(rope)},
            tie_word_embeddings=False,
            pad_token_id=PAD_ID,
            bos_token_id=BOS_ID,
            eos_token_id=EOS_ID,
        )

    def build(self) -> Gemma3ForCausalLM:
        """A randomly initialised backbone of this shape."""
        from transformers import Gemma3ForCausalLM

        return Gemma3ForCausalLM(self.config())


#: Training settings added after organisms were saved, with the value that means what those organisms did.
_ADDED_LATER: dict[str, object] = {"family": "hrm_text", "counted": False, "beyond": 0, "init": None}

#: The model families an organism is trained as: the looped HRM-Text, or the one-pass Gemma 3 backbone of the SST
#: organism (``organism train-sst``).
FAMILIES: tuple[str, ...] = ("hrm_text", "gemma3_text")


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
    counted: bool = arg(False, help="counted hops: the query states its hop count (?3c), its chain may run past it, "
                                    "and each question is trained at its sufficient depth ceil(hops/2) only, never "
                                    "deeper (the overthinking organism)")
    beyond: int = arg(0, help="counted hops: the most bindings the query's chain runs past the counted hop")
    seed: int = arg(0, help="seed of the weights, the depth draws and the task")
    test_size: int = arg(480, help="test questions for the depth-by-hop table")
    table_depth: int | None = arg(None, help="deepest depth of the test depth-by-hop table (default: --max-depth; "
                                             "deeper shows what untrained iterations do)")
    follow_ups: int = arg(4, help="extra queries per training sequence, over the same bindings (each a supervised "
                                  "lookup; a recorded prompt asks one)")
    start_hops: int = arg(2, help="the curriculum's first hop ceiling (questions of 1..this many hops at first)")
    curriculum_accuracy: float = arg(0.9, help="raise the hop ceiling by one when the running accuracy at the "
                                                "deepest loop count reaches this (1 or more: all hops from the start)")
    factored_embeddings: bool = arg(True, help="train each binding's embedding as a free row plus its sides' "
                                               "shared factors (folded into a plain embedding when saved)")
    init: str | None = arg(None, help="start from the weights of this organism (a folder train wrote, or a named "
                                      "organism such as hops-organism; same shape) instead of random ones")
    checkpoint_every: int = arg(200, help="steps between resumable saves")
    threads: int | None = arg(None, help="torch threads (default: torch's own)")
    family: str = setting("hrm_text", help="hrm_text (the looped organism) or gemma3_text (a one-pass Gemma 3 of "
                                           "OnePassShape, max_depth 1: the SST organism's backbone)")

    def spec(self) -> HopsSpec:
        """The task spec (bad combinations are a UsageError)."""
        return HopsSpec(bindings=self.bindings, max_hops=self.max_hops, chains=self.chains, seed=self.seed,
                        counted=self.counted, beyond=self.beyond)

    def shape(self) -> LoopedShape | OnePassShape:
        """The architecture."""
        if self.hidden_size < 8 or self.hidden_size % LoopedShape.num_attention_heads:
            raise UsageError(f"--hidden-size {self.hidden_size}: give a multiple of "
                             f"{LoopedShape.num_attention_heads} of at least 8")
        if self.family not in FAMILIES:
            raise UsageError(f"unknown organism family {self.family!r}; known: {', '.join(FAMILIES)}")
        if self.family == "gemma3_text":
            if self.max_depth != 1:
                raise UsageError(f"a one-pass organism runs at depth 1 only, got max_depth {self.max_depth}")
            return OnePassShape(hidden_size=self.hidden_size, intermediate_size=2 * self.hidden_size)
        return LoopedShape(hidden_size=self.hidden_size, intermediate_size=2 * self.hidden_size,
                           max_depth=self.max_depth)

    def recorded(self) -> dict[str, object]:
        """The settings that decide the weights (what ``organism.json`` keeps, and a resume must match).

        Settings added later are left out at their old behaviour's value (the looped family, the plain task), so
        that a folder written before they existed still resumes."""
        return {key: value for key, value in asdict(self).items()
                if key not in ("out", "threads", "checkpoint_every", "table_depth")
                and not (key in _ADDED_LATER and value == _ADDED_LATER[key])}

    def table_depths(self) -> range:
        """The depths of the test depth-by-hop table."""
        return range(1, (self.table_depth or self.max_depth) + 1)

    def check(self) -> None:
        """Refuse values that cannot train (UsageError), before anything is written."""
        for name in ("steps", "batch_size", "max_depth", "test_size", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if not self.learning_rate > 0:
            raise UsageError(f"--learning-rate must be positive, got {self.learning_rate}")
        if self.table_depth is not None and self.table_depth < 1:
            raise UsageError(f"--table-depth must be at least 1, got {self.table_depth}")
        spec = self.spec()
        if not spec.min_hops <= self.start_hops <= spec.max_hops:
            raise UsageError(f"--start-hops {self.start_hops} is outside 1..--max-hops ({spec.max_hops})")
        if self.init is not None and self.factored_embeddings:
            raise UsageError("--init starts from trained embeddings, which factoring would zero; add "
                             "--no-factored-embeddings")
        if spec.counted and self.max_depth < spec.max_sufficient_depth:
            raise UsageError(f"--max-depth {self.max_depth} is below the sufficient depth of {spec.max_hops}-hop "
                             f"counted questions ({spec.max_sufficient_depth}); give --max-depth "
                             f"{spec.max_sufficient_depth}")
        self.shape()


@dataclass(frozen=True)
class SSTOrganismConfig(LoopedTrainConfig):
    """``python -m sst_interp.organism train-sst``: the SST organism and its matched baseline, with ``train``'s flags
    for the backbone.

    The flags it shares with ``train`` train the backbone (:class:`OnePassShape`, one pass, from scratch, with the
    looped organism's recipe: the task, follow-up queries, the hop curriculum, factored embeddings); ``--steps`` counts
    its steps. The ``sst_*`` and LoRA flags set the two-pass stage, ``python -m sst_interp.train`` on that backbone
    (paper sec:two_pass), and the matched baseline repeats it with ``--baseline`` (sec:baseline_ft): same data, order,
    optimiser and steps. ``--max-depth`` is the deepest SST iteration count of the depth-by-hop tables.
    """

    out: Path = arg(help="folder of the SST organism: backbone/, data/, sst/, baseline/ and the depth-by-hop tables "
                         "(created; an existing folder resumes its own run)")
    steps: int = arg(3000, help="optimiser steps of the backbone (one pass, from scratch)")
    max_depth: int = arg(4, help="the SST's deepest iteration count in the depth-by-hop tables (the backbone and the "
                                 "baseline run one pass; the baseline is tabled at the same depths)")
    family: str = setting("gemma3_text", help="the backbone's family: the one-pass Gemma 3 the SST wraps")
    sst_steps: int = arg(600, help="optimiser steps of the SST stage, and of its matched baseline")
    sst_batch_size: int = arg(64, help="questions per SST-stage step (one micro-batch; every step reads new training "
                                       "questions, so the training file holds sst_steps x this many)")
    sst_validation: int = arg(480, help="validation questions of the SST stage (its early stopping, as the paper's)")
    eval_every: int = arg(50, help="SST-stage steps between validations")
    patience: int = arg(4, help="validations without a new best before the SST stage stops (paper: 4)")
    lora_r: int = arg(64, help="LoRA rank of the SST stage, on every projection and the head (alpha = rank; paper: "
                               "64 and 64)")
    lr_lora: float = arg(1e-3, help="peak LoRA learning rate of the SST stage (the paper's 1e-4 barely moves a "
                                    "from-scratch backbone in a CPU-sized run)")
    lr_sst: float = arg(1e-2, help="learning rate of the state-stream parameters (paper: 1e-2)")

    def backbone(self, out: Path) -> LoopedTrainConfig:
        """The backbone's training config (written into ``out``)."""
        shared = {f.name: getattr(self, f.name) for f in fields(LoopedTrainConfig)}
        return LoopedTrainConfig(**{**shared, "out": out, "max_depth": 1, "family": self.family})

    def shape(self) -> LoopedShape | OnePassShape:
        """The backbone's architecture."""
        return self.backbone(self.out).shape()

    def check(self) -> None:
        """Refuse values that cannot train (UsageError), before anything is written."""
        given = [flag for flag, value in (("--counted", self.counted), ("--init", self.init is not None),
                                          ("--table-depth", self.table_depth is not None)) if value]
        if given:
            raise UsageError(f"{', '.join(given)}: train-sst trains the plain hops task from scratch and tables its "
                             "own --max-depth; these flags are train's (the looped organism)")
        self.backbone(self.out).check()
        for name in ("max_depth", "sst_steps", "sst_batch_size", "sst_validation", "eval_every", "patience",
                     "lora_r"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        for name in ("lr_lora", "lr_sst"):
            if not getattr(self, name) > 0:
                raise UsageError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")


@dataclass(frozen=True)
class ValidateConfig:
    """``python -m sst_interp.organism validate``: every measurement on a recorded organism run against the task."""

    run: Path = arg(help="a run recorded from the organism with --questions hops at depths 1..D (flat)")
    out: Path = arg(help="folder for validation.md and one CSV per row (created; existing files are replaced)")
    model: str = arg("hops-organism", help="the organism the run was recorded from (a folder, or hops-organism)")
    patch_questions: int = arg(480, help="test questions the counterfactual patching draws its pairs from (each "
                                         "hop of each question, until the hop has --patch-pairs)")
    patch_pairs: int = arg(PATCH_PAIRS, help="counterfactual pairs per changed hop (every cell of the staircase rests "
                                           "on this many, or on all the questions hold)")
    folds: int = arg(5, help="question folds of the held-out hop-value probe")
    table_questions: int = arg(3000, help="fresh test questions of the depth-by-hop table and the prompt-column row "
                                          "(500 per hop count of hops-organism)")
    seed: int = arg(0, help="seed of the counterfactuals' distractor choice")
    attribution_questions: int = arg(48, help="test questions of the window and attribution-patching rows (attribution: those whose depth-1 "
                                              "answer differs from the run's deepest depth's are attributed)")
    features: Path | None = arg(None, help="a folder of shared dictionaries per block (trained/layer0, trained/layer1; "
                                           "and untrained/, shuffled/ for the controls), from python -m "
                                           "sst_interp.features train --live: adds the feature rows (pointer, basin "
                                           "shifts, feature patching of the staircase, --patch-pairs pairs per hop)")
    feature_questions: int = arg(240, help="test questions of the feature rows (the feature patching's pairs are "
                                           "drawn from them)")

    def check(self) -> None:
        """Refuse values that cannot run (UsageError), before anything loads."""
        if not (self.run / "manifest.json").is_file():
            raise UsageError(f"--run {self.run} is not a run directory (no manifest.json); record one with "
                             "python -m sst_interp.record --model hops-organism --questions hops --depths 1,2,3,4")
        if min(self.patch_questions, self.patch_pairs, self.attribution_questions, self.table_questions) < 1 \
                or self.folds < 2:
            raise UsageError("--patch-questions, --patch-pairs, --attribution-questions and --table-questions must "
                             "be at least 1 and --folds at least 2")
        if self.features is not None and not (self.features / "trained" / "layer0").is_dir():
            raise UsageError(f"--features {self.features} holds no trained/layer0 dictionary; train one with python -m "
                             "sst_interp.features train --live hops-organism --layer 0 --layout shared --out "
                             f"{self.features}/trained/layer0")


@dataclass(frozen=True)
class OverthinkConfig:
    """``python -m sst_interp.organism overthink``: the paper's halting probe (Sec. 6) and its Sec. 5 families on a
    run of an overthinking organism (``hops-overthink``), against the task's truth of which answers one more H-cycle
    breaks."""

    run: Path = arg(help="a run recorded from hops-overthink with --questions hops at depths 1..D (flat)")
    out: Path = arg(help="folder for overthink.md and one CSV per row (created; existing files are replaced)")
    layers: list[int] = arg(default_factory=list, help="layers of the probe sweep (default: every recorded layer)")
    loocv_layer: int = arg(-1, help="the layer of the LOOCV and the essential dimensions (-1: the last layer)")
    permutations: int = arg(19, help="the most label permutations of the calibrated LOOCV (each retrains every "
                                     "fold: about a minute on the organism's 240 questions; 19 reach p = 0.05; 0: "
                                     "the binomial test only)")
    seed: int = arg(0, help="seed of the permutations and of the random dimensions beside the essential set")

    def check(self) -> None:
        """Refuse values that cannot run (UsageError), before anything loads."""
        if not (self.run / "manifest.json").is_file():
            raise UsageError(f"--run {self.run} is not a run directory (no manifest.json); record one with "
                             "python -m sst_interp.record --model hops-overthink --questions hops --depths 1,2,3,4,5")
        if self.permutations < 0:
            raise UsageError(f"--permutations must be 0 or more, got {self.permutations}")

