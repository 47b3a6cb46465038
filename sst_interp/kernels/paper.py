"""The SST V2 paper's constants and its blend-coefficient formula (eq:alpha), defined once.

Everything that needs ``a_min``, ``a_max``, the initial logit or the paper model's size imports it from here: the
model (:mod:`sst_interp.model.config`, :mod:`sst_interp.model.state_stream`), training defaults, the analyses and
the report. This module is a leaf: it imports numpy only, so analyses can use it without loading torch.

eq:alpha, element-wise over the hidden dimension of layer ``l``::

    alpha_l = a_min + (a_max - a_min) * sigmoid(theta_l)

With the paper's values every coefficient starts at ``alpha_init(-1.8) ~= 0.0271``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar, Union

import numpy as np

if TYPE_CHECKING:
    import torch

#: Lower bound of every blend coefficient (the blend is never bypassed).
A_MIN = 0.015
#: Upper bound of every blend coefficient.
A_MAX = 0.10
#: Initial blend logit theta of every dimension.
THETA_INIT = -1.8

#: Size of the paper's model (Gemma 3 27B): decoder layers, hidden size, and the top-k of its overlap measure.
PAPER_NUM_LAYERS = 62
PAPER_HIDDEN_SIZE = 5376
PAPER_TOP_K = 1024
#: The paper's GMM crossover on top-k overlaps (app:gmm): a step whose overlap falls below it is low-overlap (a
#: basin shift), where a run has no fit of its own.
PAPER_THRESHOLD = 0.976

Theta = TypeVar("Theta", bound=Union["torch.Tensor", np.ndarray, float])


def alpha_from_theta(theta: Theta, a_min: float = A_MIN, a_max: float = A_MAX) -> Theta:
    """eq:alpha: blend coefficients from logits, ``a_min + (a_max - a_min) * sigmoid(theta)``.

    A torch tensor stays a tensor (same device and dtype, autograd intact: the model calls this on its parameters);
    anything else is computed in float64 numpy (a checkpoint's ``theta: [L, d]`` gives ``alpha: [L, d]``).
    """
    if hasattr(theta, "sigmoid"):  # a torch.Tensor; checked by duck type so that this module never imports torch
        return a_min + (a_max - a_min) * theta.sigmoid()
    x = np.asarray(theta, dtype=np.float64)
    # 1 / (1 + exp(-x)) is what scipy.special.expit computes for float64, bit for bit, without importing scipy.
    return a_min + (a_max - a_min) * (1.0 / (1.0 + np.exp(-x)))


def alpha_init(theta_init: float = THETA_INIT, a_min: float = A_MIN, a_max: float = A_MAX) -> float:
    """The coefficient every dimension starts at (~0.0271 for the paper's values)."""
    return float(alpha_from_theta(np.float64(theta_init), a_min, a_max))
