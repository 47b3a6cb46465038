"""Sparse dictionaries (SAEs) on the states a run recorded, per iteration or shared over a loop, on SAELens.

Modules, one concern each:

* :mod:`~sst_interp.features.options` -- the ``train`` and ``evaluate`` settings (the command's flags);
* :mod:`~sst_interp.features.sites` -- a (layer, iterations) site of a run, checked; the run's identity;
* :mod:`~sst_interp.features.states` -- a site's states streamed a shard file at a time; the held-out questions;
* :mod:`~sst_interp.features.batches` -- the endless shuffled batches SAELens' trainer reads;
* :mod:`~sst_interp.features.live` -- a live looped model's states at every prompt position, and their batches;
* :mod:`~sst_interp.features.architectures` -- the SAELens training SAEs (TopK, BatchTopK, JumpReLU) and trainer
  settings;
* :mod:`~sst_interp.features.train` -- training and writing dictionaries (per-iteration or shared);
* :mod:`~sst_interp.features.live_train` -- training on a live organism (``train --live``) and its controls;
* :mod:`~sst_interp.features.meta` -- the sidecar beside SAELens' files, and the checks a folder passes;
* :mod:`~sst_interp.features.dictionary` -- :class:`Dictionary`, :class:`DictionarySet`: load, encode, encode a run;
* :mod:`~sst_interp.features.quality` -- FVE, L0, dead and dense features, sharing across the loop;
* :mod:`~sst_interp.features.splice` -- spliced-in accuracy and loss through the intervention layer;
* :mod:`~sst_interp.features.evaluate` -- the per-iteration quality table;
* :mod:`sst_interp.cli.features` (the command line) -- ``python -m sst_interp.features {train,evaluate}``.

SAELens is an optional extra (``pip install -e ".[features]"``): importing this package loads neither it nor torch;
the modules that need them load them on first use.
"""

from typing import TYPE_CHECKING

from sst_interp.kernels.lazy import lazy_exports, typed_exports

if TYPE_CHECKING:
    from sst_interp.features.dictionary import Dictionary, DictionarySet, FeatureActivations
    from sst_interp.features.evaluate import Evaluation, evaluate_dictionaries
    from sst_interp.features.meta import DictionaryMeta, read_meta
    from sst_interp.features.options import EvaluateOptions, TrainOptions
    from sst_interp.features.sites import StateSite, resolve_site
    from sst_interp.features.states import Split
    from sst_interp.features.train import Trained, train_dictionaries

#: The public names are the `if TYPE_CHECKING:` imports above, each imported from its module on first use
#: (sst_interp.kernels.lazy), so importing the package loads neither SAELens nor torch.
_EXPORTS = typed_exports(__name__)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
