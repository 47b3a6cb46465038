"""The SAELens training SAEs a dictionary is trained as, and the trainer settings they need on a custom stream.

Every architecture is SAELens' own class (``sae_lens.saes``), trained by its ``SAETrainer``. What this module fixes
on top of SAELens' defaults, and why:

- ``normalize_activations="expected_average_only_in"``: states of different models have very different norms
  (the organism's are small, Gemma's large); SAELens scales them to a mean norm of sqrt(d) while training and
  folds the factor into the saved weights, so the saved SAE reads raw states. Its estimate consumes
  ``n_batches_for_norm_estimate`` batches first (1,000 by default; :data:`NORM_BATCHES` here).
- ``lr_end``: ``SAETrainer`` asserts it is set (only SAELens' LLM runner fills it in); the lr is cosine-annealed to a
  tenth.
- ``dead_feature_window`` is counted in steps (default 1,000): with a few thousand steps TopK's auxiliary loss for
  dead features would never start; it is a twentieth of the steps here (at least 10).
- TopK's ``k`` defaults to 100 in SAELens; here it is always given. JumpReLU is trained with SAELens' quadratic L0
  penalty around a target L0 (Gemma Scope 2), so ``k`` means the same for every architecture: the active features
  per state asked for.
"""

from __future__ import annotations

from typing import Any

from sae_lens.config import LoggingConfig, SAETrainerConfig
from sae_lens.saes import (BatchTopKTrainingSAE, BatchTopKTrainingSAEConfig, JumpReLUTrainingSAE,
                           JumpReLUTrainingSAEConfig, TopKTrainingSAE, TopKTrainingSAEConfig, TrainingSAE)

#: Batches SAELens reads to estimate the activation scale (its default, 1,000, is more than a small run holds).
NORM_BATCHES = 50
#: The normalisation every dictionary trains under (folded into the saved weights by SAETrainer.fit).
NORMALIZE = "expected_average_only_in"


def training_sae(architecture: str, d_in: int, width: int, k: int, l0_coefficient: float,
                 device: str) -> TrainingSAE:
    """A fresh SAELens training SAE of ``architecture`` (``topk``, ``batchtopk``, ``jumprelu``): ``d_in`` ->
    ``width`` features, ``k`` active per state (JumpReLU: the target L0 of its quadratic penalty, weighted by
    ``l0_coefficient``). Seed torch before calling: the initial weights are drawn here."""
    common: dict[str, Any] = {"d_in": int(d_in), "d_sae": int(width), "device": device,
                              "normalize_activations": NORMALIZE}
    if architecture == "topk":
        return TopKTrainingSAE(TopKTrainingSAEConfig(k=int(k), **common))
    if architecture == "batchtopk":
        return BatchTopKTrainingSAE(BatchTopKTrainingSAEConfig(k=float(k), **common))
    if architecture == "jumprelu":
        return JumpReLUTrainingSAE(JumpReLUTrainingSAEConfig(
            jumprelu_sparsity_loss_mode="quadratic", target_l0=float(k), l0_coefficient=float(l0_coefficient),
            **common))
    raise ValueError(f"unknown architecture {architecture!r}")


def trainer_config(steps: int, batch_size: int, lr: float, device: str) -> SAETrainerConfig:
    """SAELens' trainer settings for ``steps`` steps of ``batch_size`` states (see the module docstring)."""
    return SAETrainerConfig(
        total_training_samples=int(steps) * int(batch_size), train_batch_size_samples=int(batch_size),
        lr=float(lr), lr_end=float(lr) / 10, lr_scheduler_name="cosineannealing", device=device,
        dead_feature_window=max(10, int(steps) // 20), feature_sampling_window=max(10, int(steps) // 4),
        n_batches_for_norm_estimate=min(NORM_BATCHES, int(steps)), logger=LoggingConfig(log_to_wandb=False))
