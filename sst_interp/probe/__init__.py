"""The halting probe (paper Sec. 6, ``sec:halting_probe``; Appendix F, ``app:halting``).

Modules, one concern each:

* :mod:`~sst_interp.probe.labels` -- MUST HALT / SAFE labels from a run's flat-depth results;
* :mod:`~sst_interp.probe.dataset` -- the position-0 states each timestep and evaluation step reads;
* :mod:`~sst_interp.probe.model` -- ``HaltingProbe``: ``Linear(d, n) -> SiLU -> Linear(n, 1)``;
* :mod:`~sst_interp.probe.train` -- the paper's training recipe (Adam 1e-3, batch 32, 60 epochs, seed 42);
* :mod:`~sst_interp.probe.evaluate` -- the halting simulation, ``tab:halting_probe``, ``tab:halting_probe_per_iter``;
* :mod:`~sst_interp.probe.loocv` -- LOOCV with its binomial and permutation tests, Cover's bound;
* :mod:`~sst_interp.probe.permutation` -- label permutations within equal-correct-depth strata (the calibrated null);
* :mod:`~sst_interp.probe.sequential` -- the sequential Monte Carlo p-value that stops the permutations once settled;
* :mod:`~sst_interp.probe.crossfit` -- held-out (question-fold cross-fitted) scores;
* :mod:`~sst_interp.probe.sweeps` -- layer sweep over the whole depth, held-out layer choice, activation swap;
* :mod:`~sst_interp.probe.ablation` -- neuron contributions and ablations;
* :mod:`~sst_interp.probe.features` -- input-dimension importance, top-K sweep, greedy pruning, linear probe;
* :mod:`~sst_interp.probe.figures` -- ``fig:halt_signal`` data;
* :mod:`~sst_interp.probe.io` -- safetensors + JSON save/load;
* :mod:`~sst_interp.probe.policy` -- ``ProbeDepth``, the generation-time depth policy;
* :mod:`sst_interp.cli.probe` (the command line) -- ``python -m sst_interp.probe
  {train,evaluate,sweep,loocv,ablate}``.
"""

from typing import TYPE_CHECKING

from sst_interp.kernels.lazy import lazy_exports, typed_exports

if TYPE_CHECKING:
    from sst_interp.probe.dataset import ProbeData, load_probe_data, load_probe_data_layers
    from sst_interp.probe.evaluate import evaluate_probe, simulate_halting
    from sst_interp.probe.io import ProbeMeta, load_probe, save_probe
    from sst_interp.probe.labels import HaltLabels, labels_from_generations, make_labels
    from sst_interp.probe.model import DEFAULT_THRESHOLD, HaltingProbe, ProbeConfig
    from sst_interp.probe.policy import ProbeDepth
    from sst_interp.probe.train import TrainConfig, train_probe

#: The public names are the `if TYPE_CHECKING:` imports above, each imported from its module on first use
#: (sst_interp.kernels.lazy), so importing the package stays light.
_EXPORTS = typed_exports(__name__)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
