"""Where ``sst.intervene(...)`` finds its context manager: :mod:`sst_interp.interventions`, a floor above the model,
registers it here when it is imported, so the model never imports that package. Torch-free, so that registering
costs the interventions package nothing (it exports lazily: importing its spec alone loads no model)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: What :meth:`~sst_interp.model.sst.SSTModel.intervene` calls, ``factory(sst, spec, capture=..., question_ids=...)``
#: (the :class:`~sst_interp.interventions.live.LiveIntervention`): set by :mod:`sst_interp.interventions` when it is
#: imported; None before.
factory: Callable[..., Any] | None = None
