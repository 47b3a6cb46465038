"""The halting probe's defaults, in a module without torch, so the command line can show them before it loads."""

from __future__ import annotations

import math

#: Halt when the output logit exceeds log(0.3 / 0.7), i.e. P(halt) > 0.3 (``app:halting_eval``).
DEFAULT_THRESHOLD = math.log(0.3 / 0.7)
#: The probe's activation functions by name (:data:`sst_interp.probe.model.ACTIVATIONS` maps them to modules).
ACTIVATION_NAMES = ("gelu", "relu", "silu")
#: Label permutations of the calibrated LOOCV test when none is given (smallest p = 1/101 < 0.01).
DEFAULT_PERMUTATIONS = 100
