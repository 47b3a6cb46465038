"""The report (``python -m sst_interp.report``): every table and figure the recorded runs support, as files and as
one HTML page.

Modules, one concern each:

* :mod:`~sst_interp.reporting.config` -- :class:`ReportConfig`, the report's flags;
* :mod:`~sst_interp.reporting.inputs` -- resolving a config into opened inputs;
* :mod:`~sst_interp.reporting.artefacts` -- the artefact data classes (:class:`ArtefactSpec`, :class:`ArtefactData`);
* :mod:`~sst_interp.reporting.registry` -- every spec in page order (:func:`all_specs`), bound to runs by ``plan``;
* :mod:`~sst_interp.reporting.measured` -- the artefact of every catalogue entry with a caption (its section, caption
  and figure style are the entry's), and :mod:`~sst_interp.reporting.styles` -- figure style -> drawer;
* ``specs_*`` -- the hand-written artefacts that stack every run or experiment folder of the report (evaluation,
  depth, families, interventions);
* :mod:`~sst_interp.reporting.context` -- shared analyses, computed once per run;
* :mod:`~sst_interp.reporting.cache` -- artefact data cached under ``<out>/.cache`` keyed by input content;
* :mod:`~sst_interp.reporting.tables` -- Markdown, CSV, LaTeX (booktabs) and HTML tables;
* ``fig_*`` -- matplotlib figures (Agg canvas), by paper section;
* :mod:`~sst_interp.reporting.html` -- ``index.html``;
* :mod:`~sst_interp.reporting.build` -- :func:`build_report`, the orchestration.

Typical use::

    from sst_interp.reporting import ReportConfig, build_report
    result = build_report(ReportConfig(runs=(Path("runs/gpqa"),), baselines=(Path("runs/gpqa_base"),)))
    result.names("skipped")
"""

from typing import TYPE_CHECKING

from sst_interp.kernels.lazy import lazy_exports, typed_exports

if TYPE_CHECKING:
    from sst_interp.reporting.artefacts import ArtefactData, ArtefactSpec
    from sst_interp.reporting.build import ReportResult, build_report
    from sst_interp.reporting.config import ReportConfig
    from sst_interp.reporting.html import Outcome
    from sst_interp.reporting.inputs import ReportInputs, resolve_inputs
    from sst_interp.reporting.registry import UNSUPPORTED, all_specs

#: The public names are the `if TYPE_CHECKING:` imports above, each imported from its module on first use
#: (sst_interp.kernels.lazy), so importing the package stays light.
_EXPORTS = typed_exports(__name__)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
