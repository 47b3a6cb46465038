"""``python -m sst_interp.record``: generate answers, or CodeACT episodes, at every iteration depth; record the state
stream inline; grade.

Two protocols (``--protocol``): ``completion`` (one generation per question; the default) and ``codeact``
(multi-turn episodes whose code runs in a sandbox, as the paper evaluates: :mod:`sst_interp.codeact`)::

    python -m sst_interp.record --questions demo --depths 1,2,3,4 --out runs/demo
    python -m sst_interp.record --questions gsm8k --protocol codeact --limit 8 --depths 1,2
    torchrun --nproc-per-node 8 -m sst_interp.record ...    # N processes, one run

Modules: :mod:`~sst_interp.record.options` (the typed options; the command line that builds them is
:mod:`sst_interp.cli.record`), :mod:`~sst_interp.record.runner` (the library entries :func:`record_questions`, which
takes a loaded model, and :func:`record`, which loads it from the options),
:mod:`~sst_interp.record.plan` (the inputs resolved once), :mod:`~sst_interp.record.families` (natively looping
families), :mod:`~sst_interp.record.batches` (the batch loop both share), :mod:`~sst_interp.record.rundir` (the run
directory: resume state, disk space, the writer on every rank, the summary),
:mod:`~sst_interp.record.completion` and :mod:`~sst_interp.record.episodes` (one batch of each protocol),
:mod:`~sst_interp.record.identity` (run identity and manifest), :mod:`~sst_interp.record.numerics` (the
numerics fingerprint of the identity, ``--threads``), :mod:`~sst_interp.record.ranks` (several processes
under torchrun), :mod:`~sst_interp.record.summary`.
"""

from typing import TYPE_CHECKING

from sst_interp.kernels.lazy import lazy_exports, typed_exports
from sst_interp.record.options import DEFAULT_DEPTHS, PROTOCOLS, RecordOptions

if TYPE_CHECKING:
    from sst_interp.record.runner import record, record_questions
    from sst_interp.record.summary import print_summary, staged_capacity

#: The public names are the `if TYPE_CHECKING:` imports above, each imported from its module on first use
#: (sst_interp.kernels.lazy), so importing the package stays light.
_EXPORTS = typed_exports(__name__)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted([*_EXPORTS, "DEFAULT_DEPTHS", "PROTOCOLS", "RecordOptions"])
