"""The report's page sections, each named once: a measurement entry's ``family`` and a hand-written report spec's
``family`` name one of these constants, never a free string.

The report (:mod:`sst_interp.reporting.artefacts`) shows the sections in :data:`SECTIONS` order; each section's title
is also its heading on the page and, through its first word, its HTML anchor, so a title changes the report's output.
This module sits with the measurement entry (:mod:`sst_interp.analyses.measurement`) rather than beside the report,
because the entries of the analyses (floor 4), the probe (floor 5) and the experiments all name a section and may
not import the report (floor 6).
"""

from __future__ import annotations

EVALUATION = "Evaluation"
BASIN_SHIFTS = "Basin shifts (punctuated equilibrium)"
LOGIT_DYNAMICS = "Logit dynamics"
PRECISION_AND_CONVERGENCE = "Precision and convergence monitoring"
PER_POSITION_DEPTH = "Per-position depth"
HALTING_PROBE = "Halting probe"
ALPHA_AND_TRAINING = "Learned blend coefficients and training"
INTERVENTIONS = "Interventions"
ACROSS_FAMILIES = "Across latent-iteration families"
ATTENTION = "Attention per iteration"
FEATURES = "Sparse features through the loop"
ABLATIONS_AND_EXTERNAL = "Ablations and external comparison"

#: Every section, in the page's display order.
SECTIONS: tuple[str, ...] = (
    EVALUATION,
    BASIN_SHIFTS,
    LOGIT_DYNAMICS,
    PRECISION_AND_CONVERGENCE,
    PER_POSITION_DEPTH,
    HALTING_PROBE,
    ALPHA_AND_TRAINING,
    INTERVENTIONS,
    ACROSS_FAMILIES,
    ATTENTION,
    FEATURES,
    ABLATIONS_AND_EXTERNAL,
)
