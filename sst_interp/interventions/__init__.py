"""Interventions on the state stream and on attention patterns: change a stream at chosen (turn, position, iteration,
layer) sites while a model generates or records, and compare with the clean run.

- :mod:`~sst_interp.interventions.spec`: sites, operations and specs (JSON/YAML);
- :mod:`~sst_interp.interventions.apply`: :func:`intervene` and the :class:`Intervener` that carries a spec out;
- :mod:`~sst_interp.interventions.checks`: :func:`check_spec` (what a model and the runs a spec reads must hold) and
  :func:`patch_runs`;
- :mod:`~sst_interp.interventions.references`: the recorded-run states ``patch``, ``mean`` and ``resample`` read;
- :mod:`~sst_interp.interventions.live`: ``with sst.intervene(...) as iv``: live patch sources (another row, a clean
  pass alongside), per-row specs and the streams back as tensors;
- :mod:`~sst_interp.interventions.attention`: the ``attention`` stream, chosen heads' post-softmax weights replaced
  inside the attention function (a live source row's pattern, a given one, uniform), on the SST and the families;
- :mod:`~sst_interp.interventions.compiled`: the same rules as tensors inside the compiled decode step, and what it
  refuses;
- :mod:`~sst_interp.interventions.sites`: how many sites each rule changed, and the refusal of a rule that changed
  none;
- :mod:`~sst_interp.interventions.loops`: the same spec on a natively looping family (HRM-Text, Inkling-2 Loop):
  :func:`~sst_interp.interventions.loops.intervene_loop` and the family checks.
"""

from typing import TYPE_CHECKING, Any

from sst_interp.kernels.lazy import lazy_exports, typed_exports
from sst_interp.model import intervention_hook

if TYPE_CHECKING:
    from sst_interp.interventions.apply import Intervener, intervene
    from sst_interp.interventions.checks import check_spec, patch_runs
    from sst_interp.interventions.live import LiveIntervention
    from sst_interp.interventions.sites import SiteTally, require_sites, run_site_counts
    from sst_interp.interventions.spec import OPERATIONS, STREAMS, Intervention, InterventionSpec, Operation, Site

#: The public names are the `if TYPE_CHECKING:` imports above, each imported from its module on first use
#: (sst_interp.kernels.lazy), so importing one submodule (the spec, to parse a flag) loads neither torch nor the rest.
_EXPORTS = typed_exports(__name__)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)


def _live_intervention(sst: Any, spec: Any, **options: Any) -> Any:
    """``sst.intervene(spec, capture=..., question_ids=...)``: a
    :class:`~sst_interp.interventions.live.LiveIntervention`, whose module (and torch) loads on the first call."""
    from sst_interp.interventions.live import LiveIntervention

    return LiveIntervention(sst, spec, **options)


# Importing the package (or any of its modules) offers sst.intervene; the model may not import this floor.
intervention_hook.factory = _live_intervention
