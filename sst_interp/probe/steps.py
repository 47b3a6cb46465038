"""The halting probe's shared steps of one analysis, each computed once per
:class:`~sst_interp.study.RunAnalysis` (its ``memo``) and read by every probe measurement
(:mod:`sst_interp.probe.tables`):

- :func:`probe_bundle`: the probe (``probe=`` when given, else a 10-neuron probe trained on the run's MUST HALT
  labels, paper recipe, at the layer the held-out layer sweep chooses) and its evaluation;
- :func:`probe_sweep`: the layer sweep over the whole depth and its held-out layer choice;
- :func:`mechanistic_probe`: the 64-neuron probe the neuron analysis reads, as the paper's does;
- :func:`feature_search`: the top-K input sweep and the greedy prune of the reported probe;
- :func:`halt_labels`: the run's MUST HALT / SAFE labels, from its generations table only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sst_interp.analyses.loop_manifest import layers_at_every_iteration
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.results import NotApplicable

#: Width of the reported halting probe and of the probe the neuron analysis reads (paper sec:halting_probe_method).
REPORTED_PROBE_WIDTH = 10


MECHANISTIC_PROBE_WIDTH = 64


@dataclass(frozen=True)
class ProbeBundle:
    """The halting probe of one run and its evaluation.

    Args:
        data: labels and position-0 states at the probe layer (:class:`~sst_interp.probe.ProbeData`).
        probe: the probe (loaded from ``probe=`` or trained here).
        threshold: halting threshold on the logit.
        origin: one line saying where the probe came from.
        evaluation: :class:`~sst_interp.probe.evaluate.ProbeEvaluation` of the probe on ``data``.
    """

    data: Any
    probe: Any
    threshold: float
    origin: str
    evaluation: Any


@dataclass(frozen=True)
class ProbeSweep:
    """The layer sweep of one run and its held-out layer choice.

    Args:
        result: :class:`~sst_interp.probe.sweeps.LayerSweep` (in-sample and ``heldout_*`` columns per layer).
        layer: the layer the held-out scores select.
        reason: one line saying why.
        data: ``{layer: ProbeData}`` of the swept layers.
        layers: the swept layers (the whole depth: every layer up to 32, else an even grid of 16).
    """

    result: Any
    layer: int
    reason: str
    data: dict
    layers: list[int]


def probe_bundle(a: Any) -> ProbeBundle | NotApplicable:
    """The run's halting probe (``a.probe`` when given, else a 10-neuron probe trained on the run's labels at the
    held-out sweep's layer) and its evaluation; computed once per analysis."""
    return a.memo("probe:bundle", lambda: _bundle(a))


def _bundle(a: Any) -> ProbeBundle | NotApplicable:
    from sst_interp.probe import load_probe, load_probe_data
    from sst_interp.probe.evaluate import evaluate_probe
    from sst_interp.probe.model import DEFAULT_THRESHOLD, ProbeConfig
    from sst_interp.probe.train import TrainConfig, train_probe

    label, run = "tab:halting_probe", a.run
    if a.probe is not None:
        probe, meta = load_probe(a.probe)
        if probe.config.input_size != run.hidden_size or not 0 <= meta.layer < run.num_layers:
            return NotApplicable(f"--probe {a.probe} reads layer {meta.layer} of width {probe.config.input_size}; "
                                 f"run {a.name} has {run.num_layers} layers of width {run.hidden_size}", label)
        data = load_probe_data(run, meta.layer)
        origin = f"--probe {a.probe} (layer {meta.layer})"
        threshold = float(meta.threshold)
    else:
        data = load_probe_data(run)
        if data.labels.n_must_halt == 0:
            return NotApplicable("the run has no MUST HALT timesteps (no question passes at its staged depth and "
                                 "fails at the next flat depth); pass --probe to evaluate a trained probe", label)
        if data.labels.n_safe == 0:
            return NotApplicable("the run has no SAFE timesteps; a probe needs both classes", label)
        sweep = probe_sweep(a)
        layer, reason = sweep.layer, sweep.reason
        data = sweep.data[layer]
        config = ProbeConfig(data.hidden_size, hidden=REPORTED_PROBE_WIDTH)
        probe, _ = train_probe(data.x, data.y, config, TrainConfig())
        origin = (f"{REPORTED_PROBE_WIDTH}-neuron probe trained here on the run's labels (paper recipe, seed 42) "
                  f"at layer {layer}, the layer sweep's held-out choice: {reason}")
        threshold = float(DEFAULT_THRESHOLD)
    return ProbeBundle(data, probe, threshold, origin, evaluate_probe(probe, data, threshold))


def probe_sweep(a: Any) -> ProbeSweep:
    """The layer sweep over the whole depth (64-neuron probes, held-out scores per layer) and the layer its held-out
    result selects (sec:halting_probe_method: the layer is chosen out of sample); computed once per analysis."""
    from sst_interp.probe.dataset import load_probe_data_layers
    from sst_interp.probe.model import DEFAULT_THRESHOLD, ProbeConfig
    from sst_interp.probe.sweeps import layer_sweep, select_heldout_layer, sweep_layers
    from sst_interp.probe.train import TrainConfig

    def build() -> ProbeSweep:
        run = a.run
        # a family's layers outside its loop hold iteration 1 only: the labels need a state at every depth
        looped = layers_at_every_iteration(run.manifest)
        layers = sweep_layers(run.num_layers) if looped is None else [looped[i] for i in sweep_layers(len(looped))]
        data = load_probe_data_layers(run, layers)
        result = layer_sweep(data, ProbeConfig(run.hidden_size, hidden=MECHANISTIC_PROBE_WIDTH), TrainConfig(),
                             threshold=DEFAULT_THRESHOLD)
        layer, reason = select_heldout_layer(result)
        return ProbeSweep(result, int(layer), reason, data, layers)

    return a.memo("probe:sweep", build)


def mechanistic_probe(a: Any) -> Any:
    """The 64-neuron probe of the neuron analysis: the given probe when it has 64 units, else one trained here."""
    from sst_interp.probe.model import ProbeConfig
    from sst_interp.probe.train import TrainConfig, train_probe

    bundle = probe_bundle(a)
    if isinstance(bundle, NotApplicable):
        return bundle
    if bundle.probe.n_hidden == MECHANISTIC_PROBE_WIDTH:
        return bundle.probe

    def build() -> Any:
        bundle.data.labels.require_must_halt()
        config = ProbeConfig(bundle.data.hidden_size, hidden=MECHANISTIC_PROBE_WIDTH)
        return train_probe(bundle.data.x, bundle.data.y, config, TrainConfig())[0]

    return a.memo("probe:64", build)


def feature_search(a: Any) -> tuple[Any, Any]:
    """(top-K sweep, greedy prune or NotApplicable) of the reported probe; computed once per analysis (slow)."""
    from sst_interp.probe.features import greedy_prune, topk_sweep

    bundle = probe_bundle(a)

    def build() -> tuple[Any, Any]:
        sweep = topk_sweep(bundle.probe, bundle.data, None, bundle.threshold)
        if sweep.minimal_k is None:
            return sweep, NotApplicable("no top-K input set reproduces the unablated probe's result",
                                        "tab:halting_probe_greedy_prune")
        return sweep, greedy_prune(bundle.probe, bundle.data, sweep.minimal_k, bundle.threshold)

    return a.memo("probe:features", build)


def halt_labels(a: Any) -> Any:
    """The run's MUST HALT / SAFE labels (:class:`~sst_interp.probe.labels.HaltLabels`, from the generations table
    only), or the UsageError's reason when the run cannot be labelled; computed once per analysis."""
    from sst_interp.probe.labels import labels_from_generations

    def build() -> Any:
        try:
            return labels_from_generations(a.run.generations())
        except UsageError as err:
            return " ".join(str(err).split())

    return a.memo("probe:labels", build)
