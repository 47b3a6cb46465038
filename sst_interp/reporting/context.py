"""Shared analyses of one report, computed at most once and only when an artefact that needs them is not cached.

Several artefacts read the same analysis (every basin figure reads one :func:`punctuated_equilibrium`; every
logit table reads one set of comparison records; the probe tables share one trained probe), so the context
memoises them per run. Everything streams from the run one question at a time (the analyses' contract).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from sst_interp.analyses.results import NotApplicable
from sst_interp.analyses.api import RunAnalysis
from sst_interp.errors import UsageError
from sst_interp.paper import A_MAX, A_MIN, THETA_INIT, alpha_from_theta, alpha_init
from sst_interp.reporting.config import ReportInputs, RunInput

T = TypeVar("T")

#: Width of the reported halting probe and of the probe the neuron analysis reads (paper sec:halting_probe_method).
REPORTED_PROBE_WIDTH = 10
MECHANISTIC_PROBE_WIDTH = 64


@dataclass(frozen=True)
class ProbeBundle:
    """The halting probe of one run and its evaluation.

    Args:
        data: labels and position-0 states at the probe layer (:class:`~sst_interp.probe.ProbeData`).
        probe: the probe (loaded from ``--probe`` or trained here).
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


@dataclass(frozen=True)
class AlphaMatrix:
    """Learned blend coefficients of a checkpoint.

    Args:
        alpha: ``[L, d]`` float64 coefficients, one row per state-stream layer.
        layers: ``[L]`` the decoder layer of each row.
        source: the checkpoint folder.
        alpha_init: the coefficient every dimension started from.
    """

    alpha: np.ndarray
    layers: np.ndarray
    source: str
    alpha_init: float


class ReportContext:
    """Lazily computed, memoised analyses over :class:`ReportInputs`."""

    def __init__(self, inputs: ReportInputs) -> None:
        self.inputs = inputs
        self._memo: dict[tuple[str, ...], Any] = {}

    def memo(self, key: tuple[str, ...], build: Callable[[], T]) -> T:
        """``build()`` once per ``key``."""
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    # ------------------------------------------------------------------------------------------ runs
    def run_input(self, name: str | None) -> RunInput:
        """The run called ``name`` (the only run when None)."""
        if name is None:
            return self.inputs.runs[0]
        return self.inputs.run(name)

    def baseline(self, name: str | None) -> RunInput | None:
        """The matched baseline of run ``name`` (None without one)."""
        return self.inputs.baselines.get(self.run_input(name).name)

    def analysis(self, name: str | None) -> RunAnalysis:
        """The run's :class:`~sst_interp.analyses.RunAnalysis` (with its matched baseline): the shared steps below
        are that object's, so the report and a notebook compute them the same way."""
        item = self.run_input(name)
        base = self.baseline(item.name)

        def build() -> RunAnalysis:
            depth = min(base.run.depths) if base is not None and base.run.depths else None
            def alpha() -> Any:  # read from the run's checkpoint only when tab:precision_proof needs it
                matrix = self.alpha_for_run(item.name)
                return matrix.alpha if matrix is not None else None

            return RunAnalysis(item.run, base.run if base is not None else None, baseline_depth=depth,
                               name=item.benchmark, alpha=alpha)

        return self.memo(("analysis", item.name), build)

    def punctuated(self, name: str | None) -> Any:
        """:func:`~sst_interp.analyses.basin_profiles.punctuated_equilibrium` of the run."""
        return self.analysis(name).punctuated

    def threshold(self, name: str | None) -> tuple[float, str]:
        """The low-overlap threshold of the run and where it came from (its GMM crossover, else the paper's)."""
        return self.analysis(name).threshold

    def labels(self, name: str | None) -> pd.DataFrame:
        """Regime labels (low-overlap / stable per compared iteration pair) at the run's threshold."""
        return self.analysis(name).regime_labels()

    def records(self, name: str | None) -> Any:
        """:class:`~sst_interp.analyses.logit_dynamics.LogitRecords` of the run (window = full positions)."""
        return self.analysis(name).logit_records()

    def convergence(self, name: str | None) -> Any:
        """:func:`~sst_interp.analyses.convergence.convergence_monitoring` of the run."""
        return self.analysis(name).convergence()

    # ------------------------------------------------------------------------------------------ probe
    def probe(self, name: str | None) -> ProbeBundle | NotApplicable:
        """The run's halting probe: ``--probe`` when given, else a 10-neuron probe trained on the run's labels."""
        item = self.run_input(name)
        return self.memo(("probe", item.name), lambda: self._probe(item))

    def _probe(self, item: RunInput) -> ProbeBundle | NotApplicable:
        from sst_interp.probe import load_probe, load_probe_data
        from sst_interp.probe.evaluate import evaluate_probe
        from sst_interp.probe.model import DEFAULT_THRESHOLD, ProbeConfig
        from sst_interp.probe.train import TrainConfig, train_probe

        label = "tab:halting_probe"
        if self.inputs.probe is not None:
            probe, meta = load_probe(self.inputs.probe)
            if probe.config.input_size != item.run.hidden_size or not 0 <= meta.layer < item.run.num_layers:
                return NotApplicable(f"--probe {self.inputs.probe} reads layer {meta.layer} of width "
                                     f"{probe.config.input_size}; run {item.name} has {item.run.num_layers} layers "
                                     f"of width {item.run.hidden_size}", label)
            data = load_probe_data(item.run, meta.layer)
            origin = f"--probe {self.inputs.probe} (layer {meta.layer})"
            threshold = float(meta.threshold)
        else:
            data = load_probe_data(item.run)
            if data.labels.n_must_halt == 0:
                return NotApplicable("the run has no MUST HALT timesteps (no question passes at its staged depth "
                                     "and fails at the next flat depth); pass --probe to evaluate a trained probe",
                                     label)
            if data.labels.n_safe == 0:
                return NotApplicable("the run has no SAFE timesteps; a probe needs both classes", label)
            sweep = self.probe_sweep(item.name)
            layer, reason = sweep.layer, sweep.reason
            data = sweep.data[layer]
            config = ProbeConfig(data.hidden_size, hidden=REPORTED_PROBE_WIDTH)
            probe, _ = train_probe(data.x, data.y, config, TrainConfig())
            origin = (f"{REPORTED_PROBE_WIDTH}-neuron probe trained here on the run's labels (paper recipe, seed 42) "
                      f"at layer {layer}, the layer sweep's held-out choice: {reason}")
            threshold = float(DEFAULT_THRESHOLD)
        return ProbeBundle(data, probe, threshold, origin, evaluate_probe(probe, data, threshold))

    def probe_sweep(self, name: str | None) -> ProbeSweep:
        """The halting-probe layer sweep over the whole depth (64-neuron probes, held-out scores per layer) and the
        layer its held-out result selects (sec:halting_probe_method; issue: the layer is chosen out of sample)."""
        from sst_interp.probe.dataset import load_probe_data_layers
        from sst_interp.probe.model import DEFAULT_THRESHOLD, ProbeConfig
        from sst_interp.probe.sweeps import layer_sweep, select_heldout_layer, sweep_layers
        from sst_interp.probe.train import TrainConfig

        item = self.run_input(name)

        def build() -> ProbeSweep:
            run = item.run
            layers = sweep_layers(run.num_layers)
            data = load_probe_data_layers(run, layers)
            result = layer_sweep(data, ProbeConfig(run.hidden_size, hidden=MECHANISTIC_PROBE_WIDTH), TrainConfig(),
                                 threshold=DEFAULT_THRESHOLD)
            layer, reason = select_heldout_layer(result)
            return ProbeSweep(result, int(layer), reason, data, layers)

        return self.memo(("probe_sweep", item.name), build)

    def mechanistic_probe(self, name: str | None) -> Any:
        """The 64-neuron probe of the neuron analysis: ``--probe`` when it has 64 units, else one trained here."""
        from sst_interp.probe.model import ProbeConfig
        from sst_interp.probe.train import TrainConfig, train_probe

        bundle = self.probe(name)
        if isinstance(bundle, NotApplicable):
            return bundle
        if bundle.probe.n_hidden == MECHANISTIC_PROBE_WIDTH:
            return bundle.probe
        item = self.run_input(name)

        def build() -> Any:
            bundle.data.labels.require_must_halt()
            config = ProbeConfig(bundle.data.hidden_size, hidden=MECHANISTIC_PROBE_WIDTH)
            return train_probe(bundle.data.x, bundle.data.y, config, TrainConfig())[0]

        return self.memo(("probe64", item.name), build)

    def feature_search(self, name: str | None) -> tuple[Any, Any]:
        """(top-K sweep, greedy prune or NotApplicable) of the reported probe (memoised; they are slow)."""
        from sst_interp.probe.features import greedy_prune, topk_sweep

        bundle = self.probe(name)
        item = self.run_input(name)

        def build() -> tuple[Any, Any]:
            sweep = topk_sweep(bundle.probe, bundle.data, None, bundle.threshold)
            if sweep.minimal_k is None:
                return sweep, NotApplicable("no top-K input set reproduces the unablated probe's result",
                                            "tab:halting_probe_greedy_prune")
            return sweep, greedy_prune(bundle.probe, bundle.data, sweep.minimal_k, bundle.threshold)

        return self.memo(("features", item.name), build)

    # ------------------------------------------------------------------------------------------ alpha
    def alpha(self, checkpoint: str | None) -> AlphaMatrix | NotApplicable:
        """Blend coefficients of an SST checkpoint folder (read from its safetensors; no model is built)."""
        if checkpoint is None:
            reasons = sorted(set(self.inputs.missing_checkpoints.values()))
            return NotApplicable(reasons[0] if reasons else "no SST checkpoint given (--checkpoint)", "alpha")
        return self.memo(("alpha", checkpoint), lambda: read_alpha(Path(checkpoint)))

    def alpha_for_run(self, name: str | None) -> AlphaMatrix | None:
        """The alpha of the checkpoint run ``name`` was recorded with, or None."""
        ckpt = self.inputs.checkpoints.get(self.run_input(name).name)
        result = self.alpha(str(ckpt)) if ckpt is not None else None
        return result if isinstance(result, AlphaMatrix) else None


def read_alpha(folder: Path) -> AlphaMatrix:
    """eq:alpha (:func:`sst_interp.paper.alpha_from_theta`) for every layer of a checkpoint folder."""
    from safetensors.numpy import load_file

    from sst_interp.model.checkpoint import STATE_FILE, read_checkpoint_config

    meta = read_checkpoint_config(folder)
    sst = meta["sst"]
    a_min, a_max = float(sst.get("a_min", A_MIN)), float(sst.get("a_max", A_MAX))
    theta_init = float(sst.get("theta_init", THETA_INIT))
    tensors = load_file(str(folder / STATE_FILE))
    layers = sorted(int(k.split(".")[1]) for k in tensors if k.endswith(".theta"))
    if not layers:
        raise UsageError(f"{folder / STATE_FILE} holds no layers.*.theta tensors; it is not an SST checkpoint")
    theta = np.stack([np.asarray(tensors[f"layers.{i}.theta"], dtype=np.float64) for i in layers])
    alpha = alpha_from_theta(theta, a_min, a_max)
    return AlphaMatrix(alpha, np.asarray(layers, dtype=np.int64), str(folder), alpha_init(theta_init, a_min, a_max))
