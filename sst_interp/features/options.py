"""What ``python -m sst_interp.features train|evaluate|attribute`` is asked to do, in a module without torch or
SAELens: the configs :mod:`sst_interp.features.train`, :mod:`sst_interp.features.evaluate` and
:mod:`sst_interp.experiments.attribute_features` take, and the one declaration of the command's flags (``--help``
shows them at once)."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sst_interp.kernels.fields import arg
from sst_interp.model.device_flags import device_arg

#: The dictionary layouts: one dictionary per (site, iteration), or one shared by every iteration of a looped site.
Layout = Literal["per-iteration", "shared"]
LAYOUTS: tuple[str, ...] = typing.get_args(Layout)
#: The SAELens architectures a dictionary is trained as (BatchTopK is saved by SAELens as a JumpReLU SAE).
Architecture = Literal["topk", "batchtopk", "jumprelu"]
ARCHITECTURES: tuple[str, ...] = typing.get_args(Architecture)


@dataclass(frozen=True)
class TrainOptions:
    """Options of ``train`` (one flag per field)."""

    layer: int = arg(help="the recorded layer of the site, 0-based (on HRM-Text: 0 the L block, 1 the H block)")
    run: Path | None = arg(None, help="run directory whose full hidden states (hidden/ shards) the dictionary is "
                                      "trained on (or --live)")
    live: str | None = arg(None, help="train on a live organism instead of a run: an organism folder or "
                                      "hops-organism, run on its task's --split prompts at --depth, every position")
    split: str = arg("train", help="--live: the task split whose prompts the model runs (train, validation, test)")
    questions: int = arg(2000, help="--live: prompts drawn from --split (their states at every position and "
                                    "iteration are the training states)")
    untrained: bool = arg(False, help="--live: the organism's initial weights (its shape built under --seed), not "
                                      "its trained ones: the control without a mechanism")
    shuffle_dims: bool = arg(False, help="--live: permute the dimensions of each state (its own permutation) "
                                         "before training: the control without a mechanism")
    iterations: list[int] | None = arg(None, help="comma-separated iterations of the site (default: every iteration "
                                                  "the run recorded at the layer and depth)")
    depth: int | None = arg(None, help="the run depth whose states are read (default: the run's largest)")
    layout: Layout = arg("per-iteration", help="per-iteration: one dictionary per iteration (OUT/iteration-N/); "
                                               "shared: one dictionary trained on the states of every iteration, "
                                               "so feature f is one direction at every iteration")
    architecture: Architecture = arg("topk", help="the SAELens architecture")
    width: int | None = arg(None, help="features per dictionary (default: 8 x the hidden size)")
    k: int = arg(16, help="active features per state: TopK's k, BatchTopK's mean k, JumpReLU's target L0")
    l0_coefficient: float = arg(1.0, help="JumpReLU only: the weight of its L0 penalty around the target")
    steps: int = arg(2000, help="training steps per dictionary")
    batch_size: int = arg(1024, help="states per training step")
    lr: float = arg(1e-3, help="Adam learning rate (cosine-annealed to a tenth of it)")
    holdout: float = arg(0.1, help="fraction of the run's questions held out of training (chosen by a hash of the "
                                   "question id and --seed; evaluate scores on them)")
    seed: int = arg(0, help="seed of the weights, the held-out questions and the shuffling")
    buffer: int = arg(65536, help="states shuffled together before batching (memory: buffer x d x 4 bytes)")
    out: Path | None = arg(None, help="output folder (default: <run>/features/layer<L>-<layout>-<architecture>)")
    device: str = device_arg()


@dataclass(frozen=True)
class EvaluateOptions:
    """Options of ``evaluate`` (one flag per field)."""

    dictionary: Path = arg(help="a dictionary folder (train's --out), or a per-iteration folder of iteration-N/ "
                                "dictionaries")
    run: Path | None = arg(None, help="run to score on (default: the dictionary's own run, on its held-out "
                                      "questions; another run of the same model is scored on all its questions)")
    against: Path | None = arg(None, help="per-iteration dictionaries of the same site and width to compare a "
                                          "shared dictionary with (FVE and L0 per iteration)")
    layer: int | None = arg(None, help="the layer to score at (default: the dictionary's; another is refused)")
    iterations: list[int] | None = arg(None, help="comma-separated iterations to score (default: every one the "
                                                  "dictionary covers)")
    splice: bool = arg(True, help="also rerun the model with the state at each iteration replaced by its "
                                  "reconstruction (and by zero): accuracy and loss")
    model: str | None = arg(None, help="the model folder for --splice (default: the model the run recorded, "
                                       "hops-organism by name)")
    limit: int | None = arg(None, help="score only the first N questions (default: all)")
    batch_size: int = arg(64, help="questions per generation batch when splicing")
    out: Path | None = arg(None, help="output folder of the table (default: <dictionary>/evaluation)")
    device: str = device_arg()


@dataclass(frozen=True)
class AttributeOptions:
    """Options of ``attribute`` (one flag per field): feature-level attribution patching at one site of a
    dictionary, from a clean and a counterfactual prompt."""

    dictionary: Path = arg(help="a dictionary folder (train's --out; of a per-iteration set, the iteration-N/ "
                                "folder of --iteration)")
    iteration: int = arg(help="the iteration of the site (the dictionary must cover it)")
    clean: str = arg(help="the clean prompt, as text (tokenised by the model's tokenizer)")
    counterfactual: str = arg(help="the counterfactual prompt, as text: each feature is patched from it into the "
                                   "clean run")
    model: str | None = arg(None, help="a model folder or a named model (default: the model the dictionary's "
                                       "sidecar records, e.g. hops-organism for a --live dictionary)")
    target: str | None = arg(None, help="the token whose logit M reads, as a token string (default: the "
                                        "counterfactual's greedy answer token at --depth)")
    foil: str | None = arg(None, help="the token whose logit M subtracts, M = logit(target) - logit(foil) "
                                      "(default: the clean prompt's greedy answer token at --depth)")
    layer: int | None = arg(None, help="the recorded layer of the site (default: the dictionary's; another is "
                                       "refused)")
    position: int = arg(0, help="the generated position of the site (0: the first answer token's column); at or "
                                "before the target's, which is position 0")
    depth: int | None = arg(None, help="iterations per position (default: the largest iteration the dictionary "
                                       "covers)")
    verify: int = arg(5, help="how many features, largest |estimate| first, are also patched for real")
    out: Path | None = arg(None, help="write the table to this CSV file (default: print it only)")
    device: str = device_arg()
