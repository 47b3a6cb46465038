"""The halting probe's defaults, in a module without torch, so the command line can show them before it loads."""

from __future__ import annotations

import math

#: Halt when the output logit exceeds log(0.3 / 0.7), i.e. P(halt) > 0.3 (``app:halting_eval``).
DEFAULT_THRESHOLD = math.log(0.3 / 0.7)
#: The probe's activation functions by name (:data:`sst_interp.probe.model.ACTIVATIONS` maps them to modules).
ACTIVATION_NAMES = ("gelu", "relu", "silu")
#: The most label permutations the calibrated LOOCV test draws when none is given: smallest p = 1/100, and with
#: 0.05 x (99 + 1) a whole number the sequential test stops at 5 permuted LOOCVs as good as the observed one without
#: changing any decision at 0.05 (:mod:`sst_interp.probe.sequential`).
DEFAULT_PERMUTATIONS = 99
#: The level the sequential permutation test settles its answer at when none is given.
DEFAULT_ALPHA = 0.05
