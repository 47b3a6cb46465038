"""Interventions on the state stream: change a stream at chosen (turn, position, iteration, layer) sites while a
model generates or records, and compare with the clean run.

- :mod:`~sst_interp.interventions.spec`: sites, operations and specs (JSON/YAML);
- :mod:`~sst_interp.interventions.apply`: :func:`intervene` and the :class:`Intervener` that carries a spec out;
- :mod:`~sst_interp.interventions.live`: ``with sst.intervene(...) as iv``: live patch sources (another row, a clean
  pass alongside), per-row specs and the streams back as tensors;
- :mod:`~sst_interp.interventions.compiled`: the same rules as tensors inside the compiled decode step, and what it
  refuses;
- :mod:`~sst_interp.interventions.sites`: how many sites each rule changed, and the refusal of a rule that changed
  none;
- :mod:`~sst_interp.interventions.loops`: the same spec on a natively looping family (HRM-Text, Inkling-2 Loop):
  :func:`~sst_interp.interventions.loops.intervene_loop` and the family checks.
"""

from sst_interp.interventions.apply import Intervener, check_spec, intervene, patch_runs
from sst_interp.interventions.live import LiveIntervention
from sst_interp.interventions.sites import SiteTally, require_sites, run_site_counts
from sst_interp.interventions.spec import OPERATIONS, STREAMS, Intervention, InterventionSpec, Operation, Site

__all__ = ["OPERATIONS", "STREAMS", "Intervener", "Intervention", "InterventionSpec", "LiveIntervention", "Operation",
           "Site", "SiteTally", "check_spec", "intervene", "patch_runs", "require_sites", "run_site_counts"]
