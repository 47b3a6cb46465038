"""What each ``python -m sst_interp.probe`` job is asked to do, in a module without torch: the configs the jobs of
:mod:`sst_interp.probe.jobs` take and the one declaration of the command's flags (``--help`` shows them at once).

:class:`ProbeRunConfig` is shared by every job (the run, the layer, the probe's shape and training);
:class:`LayerSweepConfig`, :class:`LoocvConfig` and :class:`AblateConfig` add the options of ``sweep``, ``loocv``
and ``ablate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sst_interp.kernels.fields import arg
from sst_interp.probe.defaults import ACTIVATION_NAMES, DEFAULT_ALPHA, DEFAULT_PERMUTATIONS, DEFAULT_THRESHOLD


@dataclass(frozen=True)
class ProbeRunConfig:
    """Options shared by every probe job (one flag per field)."""

    run: Path = arg(help="run directory (recorded at flat depths 1..i_max)")
    layer: int | None = arg(None, help="probe layer, 0-based (default: the paper's layer 15 of 62 at the same depth "
                                       "fraction)")
    out: Path | None = arg(None, help="output folder (default: <run>/probe/layer<L>, <run>/probe/sweep for sweep)")
    # None until the command resolves it: the default width depends on the job.
    hidden: int | None = arg(None, help="probe bottleneck width (default 10; 64 for sweep and ablate)")
    activation: str = arg("silu", choices=ACTIVATION_NAMES, help="probe activation")
    threshold: float = arg(DEFAULT_THRESHOLD, help="halt when the probe's logit is above this")
    epochs: int = arg(60, help="training epochs")
    seed: int = arg(42, help="training seed")
    probe: Path | None = arg(None, help="a saved probe (folder or .safetensors) to evaluate or ablate instead of "
                                        "training one")


@dataclass(frozen=True)
class LayerSweepConfig:
    """Options of the layer sweep (``sweep``)."""

    layers: list[int] | None = arg(None, help="comma-separated layers (default: the whole depth: every layer up to 32 "
                                        "layers, else 16 evenly spaced including the first and last)")
    loocv_layers: list[int] = arg(default_factory=list, help="comma-separated layers to run LOOCV at (default: none)")
    permutations: int = arg(DEFAULT_PERMUTATIONS, help="the most label permutations of the out-of-sample LOOCV "
                                                       "null at the --loocv-layers, drawn until the answer at "
                                                       "--permutation-alpha is settled (0: the paper's binomial "
                                                       "test only)")
    permutation_seed: int = arg(0, help="seed of the permutations")
    permutation_alpha: float = arg(DEFAULT_ALPHA, help="the level the sequential permutation test settles its answer "
                                                       "at (smaller: more permutations on a strong effect, a finer p)")


@dataclass(frozen=True)
class LoocvConfig:
    """Options of leave-one-MUST-HALT-question-out cross-validation (``loocv``)."""

    criterion: str = arg("outcome", choices=("outcome", "detection"),
                         help="what counts as the held-out question classified correctly: outcome (it ends correct "
                              "in the halting simulation) or detection (all its MUST HALT timesteps are above the "
                              "threshold)")
    permutations: int = arg(DEFAULT_PERMUTATIONS, help="the most label permutations for the out-of-sample null "
                                                       "(each retrains every fold), drawn until the answer at "
                                                       "--permutation-alpha is settled; 0: the paper's binomial test "
                                                       "only")
    permutation_seed: int = arg(0, help="seed of the permutations")
    permutation_alpha: float = arg(DEFAULT_ALPHA, help="the level the sequential permutation test settles its answer "
                                                       "at (smaller: more permutations on a strong effect, a finer p)")


@dataclass(frozen=True)
class AblateConfig:
    """Options of the neuron and input-dimension ablations (``ablate``)."""

    ks: list[int] | None = arg(None, help="comma-separated K grid for the top-K sweep (default: powers of two and d)")
    keep: list[int] = arg(default_factory=lambda: [10, 15, 20, 30], help="comma-separated keep-top-N neuron counts")
    top: int = arg(10, help="size of the top ensemble for the complementary ablation")
    linear_loocv: bool = arg(False, help="LOOCV of the linear probe on the essential set")
    activation_swap: bool = arg(False, help="retrain with SiLU/GELU/ReLU (+ LOOCV)")
