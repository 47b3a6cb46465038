"""The analysis objects: the paper's measurements of a run, a checkpoint, training logs or an experiment folder,
looked up in the catalogue and computed once (``study.open(run)`` -> :class:`RunAnalysis`).

::

    from sst_interp import study
    a = study.open("runs/demo")                    # a path or a Run; baseline= optional (a path or a Run)
    a.available()                                   # what this run supports, and why not the rest (cheap)
    a.gmm_threshold                                 # the run's low-overlap threshold (app:gmm)
    a.staged_breakdown()                            # tab:staged_breakdown as tidy data (one row per stage)
    a.data("tab:argmax_concentration")              # the same by paper label
    a.table("tab:argmax_concentration")             # the paper's layout, as the report writes it
    a.notes("tab:argmax_concentration")             # provenance: the threshold and where it came from

Each measurement is declared once, in the module of its family, and :mod:`sst_interp.catalogue` gathers them all;
the methods here are generated from those entries, so this module sits above the catalogue (floor 6 of
docs/architecture.md) and imports it like any other module. The expensive shared steps (punctuated equilibrium and
its GMM threshold, regime labels at that threshold, the per-iteration logit comparison records, convergence
monitoring) and every measurement are computed at most once per object. A measurement the run cannot support raises
:class:`~sst_interp.analyses.availability.NotAvailable` with the reason. The report builds its artefacts from these
same objects (:class:`sst_interp.reporting.context.ReportContext`), so no step of the chain run -> threshold ->
labels -> records lives only in the report.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from sst_interp import catalogue
from sst_interp.analyses import logit_dynamics as ld
from sst_interp.analyses.availability import NotAvailable
from sst_interp.analyses.basin_profiles import low_overlap_threshold, punctuated_equilibrium
from sst_interp.analyses.by_question import selected
from sst_interp.analyses.checkpoint_figures import read_alpha
from sst_interp.analyses.convergence import convergence_monitoring
from sst_interp.analyses.intervention_effect import intervention_effect
from sst_interp.analyses.logit_lens import layer_lens, load_lens_head
from sst_interp.analyses.measurement import Measurement
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.outcomes import correctness_matrix
from sst_interp.kernels.results import NotApplicable
from sst_interp.store import CorruptRunError, Run


def as_run(source: str | Path | Run) -> Run:
    """A :class:`~sst_interp.store.Run` from a run directory path or a Run."""
    if isinstance(source, Run):
        return source
    if isinstance(source, (str, Path)):
        return Run.open(source)
    raise UsageError(f"expected a run directory path or a Run, got {type(source).__name__}")


class Measured:
    """What every analysis object shares: measurements of its scope, looked up in the catalogue and computed once.

    A subclass sets :attr:`scope` (``run``, ``checkpoint`` or ``training``: what the measurement reads) and offers
    what that scope's entries compute from.
    """

    scope = "run"

    def __init__(self) -> None:
        self._memo: dict[str, Any] = {}

    def memo(self, key: str, build: Callable[[], Any]) -> Any:
        """``build()`` once per ``key`` for this object (the shared steps of measurements declared elsewhere, such
        as the probe's, use it too)."""
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    _once = memo

    def __getattr__(self, name: str) -> Any:
        # One method per measurement of this scope, generated on first use from the catalogue's entries.
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            measurement = catalogue.lookup(name)
        except UsageError:
            raise AttributeError(f"{type(self).__name__} has no attribute or measurement {name!r}") from None
        if measurement.name != name or measurement.scope != self.scope:
            raise AttributeError(name)
        return _measurement_method(measurement).__get__(self, type(self))

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *(m.name for m in self._scope_entries())})

    def _entry(self, key: str) -> Measurement:
        measurement = catalogue.lookup(key)
        if measurement.scope != self.scope:
            opener = {"run": "study.open(run)", "checkpoint": "study.open_checkpoint(folder)",
                      "training": "study.open_training(sst=..., baseline=...)",
                      "experiment": "study.open_experiment(folder)",
                      "comparison": "study.open_comparison(runs=..., baseline=..., training=..., external=...)"
                      }[measurement.scope]
            raise NotAvailable(f"{measurement.key} is a measurement of a {measurement.scope}, not of a "
                               f"{self.scope}; use {opener}")
        return measurement

    def attempt(self, key: str) -> Any:
        """The analysis result of a measurement, or a NotApplicable saying why this object cannot support it (an
        unmet requirement, what the analysis found, or a UsageError the computation raised); never raises for an
        unsupported input."""
        measurement = self._entry(key)
        unmet = measurement.unsupported(self, catalogue.REQUIREMENTS)
        if unmet is not None:
            return NotApplicable(unmet, measurement.key)
        return self.computed(measurement.name)

    def computed(self, name: str) -> Any:
        """The measurement's computation, memoised, without its checks (what :meth:`attempt` returns once they
        pass, and what a ``found`` check that computes reads): a NotApplicable for a UsageError it raised."""
        measurement = catalogue.lookup(name)
        return self._once(f"measurement:{measurement.name}", lambda: _computed(measurement, self))

    def result(self, key: str) -> Any:
        """The analysis result of a measurement (its key, name or artefact: see
        :func:`~sst_interp.catalogue.lookup`), computed once.

        Raises:
            NotAvailable: the key is unknown (with the closest keys), a requirement is unmet, or the analysis found
                the input cannot support it; the message says why and how to fix it.
        """
        result = self.attempt(key)
        if isinstance(result, NotApplicable):
            raise NotAvailable(f"{catalogue.lookup(key).key}: {result.reason}")
        return result

    def data(self, key: str, question: str | None = None, depth: int | None = None,
             turn: int | None = None) -> pd.DataFrame:
        """A measurement as tidy data: one row per observation, typed columns, units in the names (each entry's
        ``columns`` documents them).

        Args:
            key: the measurement (``tab:overthinking``, ``fig:overlap_heatmap``; ``tab_``/``fig_`` and the bare name
                work too).
            question: a question id: a figure that shows one question (fig:overlap_heatmap, its zoom) is computed
                for it; a figure whose data carry ``question_id`` (the layer profiles' traces, fig:halt_signal,
                fig:convergence_monitoring) is cut to its rows.
            depth: the depth to compare at (the heatmaps: the smallest depth against this one; default the
                largest), or the rows of that depth.
            turn: the model turn (default 0).

        Raises:
            NotAvailable: the measurement is unknown or unsupported, or has no such question or depth (the reason).
        """
        measurement = self._entry(key)
        if question is None and depth is None and turn is None:
            return measurement.tidy(self.result(key))
        if measurement.per_question is None:
            rows = selected(measurement.tidy(self.result(key)), measurement.key, question, depth, turn)
            if isinstance(rows, str):
                raise NotAvailable(rows)
            return rows
        if question is None:
            raise NotAvailable(f"{measurement.key} shows one question: pass question= (a question id) with depth=")
        unmet = measurement.unmet(self, catalogue.REQUIREMENTS)
        if unmet is not None:
            raise NotAvailable(f"{measurement.key}: {unmet}")
        def build() -> Any:
            try:
                return measurement.per_question(self, question, depth, turn)
            except CorruptRunError:
                raise
            except UsageError as err:
                return NotApplicable(" ".join(str(err).split()), measurement.key)

        result = self.memo(f"question:{measurement.name}:{question}:{depth}:{turn}", build)
        if isinstance(result, NotApplicable):
            raise NotAvailable(f"{measurement.key}: {result.reason}")
        return measurement.tidy(result)

    def table(self, key: str) -> pd.DataFrame:
        """A measurement in the paper's layout (what the report writes)."""
        return catalogue.lookup(key).present(self.result(key))[0]

    def notes(self, key: str) -> list[str]:
        """The provenance notes of a measurement (where its threshold came from, what it left out, the counts
        behind it), as the report prints them under the table."""
        measurement, result = catalogue.lookup(key), self.result(key)
        return [*measurement.notes(self, result), *measurement.present(result)[1]]

    def available(self) -> pd.DataFrame:
        """What this object supports: ``label``, ``measurement``, ``available``, ``reason`` per catalogue entry
        of its scope. A promise: every measurement listed as available computes, and every other one says why not and,
        where there is one, the fix.

        The declared requirements are checked first, from the manifest and the inputs' presence. What the manifest
        cannot tell (enough MUST HALT questions for the probe, a basin shift at position 0) is checked next
        (:attr:`~sst_interp.analyses.measurement.Measurement.found`): that may compute the shared steps (the basin
        step's GMM fit, the halting labels), once per object, which :meth:`data` then reuses. Never raises.
        """
        rows = []
        for measurement in self._scope_entries():
            reason = measurement.unsupported(self, catalogue.REQUIREMENTS)
            rows.append((measurement.key, measurement.name, reason is None, reason or ""))
        return pd.DataFrame(rows, columns=["label", "measurement", "available", "reason"])

    @classmethod
    def measurements(cls) -> pd.DataFrame:
        """The catalogue entries of this scope: ``label``, ``measurement``, ``title``, ``requires``, ``columns``."""
        return pd.DataFrame([(m.key, m.name, m.title, ", ".join(m.requires), ", ".join(m.columns))
                             for m in cls._scope_entries()],
                            columns=["label", "measurement", "title", "requires", "columns"])

    @classmethod
    def _scope_entries(cls) -> list[Measurement]:
        return [m for m in catalogue.all_measurements() if m.scope == cls.scope]


class RunAnalysis(Measured):
    """The paper's measurements of one run, with the shared steps computed once.

    Args:
        run: the run (a path or a :class:`~sst_interp.store.Run`).
        baseline: the matched baseline run (a path or a Run), for tab:main_results and the baseline rows of
            tab:overthinking and tab:repetition; optional.
        baseline_depth: the baseline's depth (default: its only, or shallowest, depth).
        name: the benchmark name used in multi-benchmark tables (default: the manifest's ``questions``).
        alpha: the run's checkpoint blend coefficients [L, d] (or a function returning them, called when first
            needed), for tab:precision_proof's analytic bound; optional.
        probe: a saved halting probe (``python -m sst_interp.probe train``) for the probe's tables; without one
            they train a 10-neuron probe on the run's MUST HALT labels (paper recipe) at the held-out sweep's layer.
        dictionary: a sparse dictionary folder (``python -m sst_interp.features train``) for the feature
            measurements (feature_sets, feature_basin_shifts, feature_trajectories); without one they are
            unavailable.
    """

    def __init__(self, run: str | Path | Run, baseline: str | Path | Run | None = None,
                 baseline_depth: int | None = None, name: str | None = None, alpha: Any = None,
                 probe: str | Path | None = None, dictionary: str | Path | None = None) -> None:
        self.run = as_run(run)
        self.baseline = as_run(baseline) if baseline is not None else None
        self.baseline_depth = baseline_depth if baseline_depth is not None or self.baseline is None else min(
            self.baseline.depths)
        self.name = name or str(self.run.manifest.get("questions") or self.run.path.name)
        self.alpha = alpha
        self.probe = Path(probe) if probe is not None else None
        self.dictionary = Path(dictionary) if dictionary is not None else None
        super().__init__()

    def __repr__(self) -> str:
        base = f", baseline={self.baseline.path}" if self.baseline is not None else ""
        return f"RunAnalysis({self.run.path}, depths={self.run.depths}{base})"

    # ------------------------------------------------------------------------------------ shared steps
    @property
    def punctuated(self) -> Any:
        """:func:`~sst_interp.analyses.basin_profiles.punctuated_equilibrium` (a NotApplicable when unsupported)."""
        return self._once("pe", lambda: punctuated_equilibrium(self.run))

    @property
    def threshold(self) -> tuple[float, str]:
        """(low-overlap threshold, where it came from): the run's GMM crossover, else the paper's."""
        return low_overlap_threshold(self.punctuated)

    @property
    def gmm_threshold(self) -> float:
        """The low-overlap threshold the regime labels use (app:gmm)."""
        return self.threshold[0]

    def regime_labels(self) -> pd.DataFrame:
        """Low-overlap / stable label per compared iteration pair and position, at :attr:`gmm_threshold`."""
        return self._once("labels", lambda: ld.labels_from_run(self.run, threshold=self.gmm_threshold))

    def logit_records(self) -> Any:
        """:class:`~sst_interp.analyses.logit_dynamics.LogitRecords` (window: the run's full positions; top-n:
        min(100, the run's top-K), so a run recorded with top-K below 100 works)."""
        top_k = int(self.run.manifest.get("top_k") or 100)
        window = int(self.run.manifest.get("full_positions") or 10)
        return self._once("records", lambda: ld.collect_records(
            self.run, self.regime_labels(), max_positions=window, top_n=min(100, top_k)))

    def convergence(self) -> Any:
        """:func:`~sst_interp.analyses.convergence.convergence_monitoring` (a NotApplicable when unsupported)."""
        return self._once("convergence", lambda: convergence_monitoring(self.run))

    # ------------------------------------------------------------------------------------ measurements
    def correctness(self) -> pd.DataFrame:
        """[questions, depths] bool: each question's episode verdict at each flat depth."""
        return correctness_matrix(self.run)

    def checkpoint_alpha(self) -> Any:
        """The blend coefficients given as ``alpha`` (a callable is called once), or None."""
        if callable(self.alpha):
            self.alpha = self.alpha()
        return self.alpha

    def intervention_effect(self, clean: str | Path | Run) -> pd.DataFrame:
        """This run (intervened) against the ``clean`` run of the same questions, per depth: accuracies, staged
        capacities, flips with McNemar's exact p, the clean first token's log-prob change at position 0
        (:mod:`sst_interp.analyses.intervention_effect`)."""

        result = intervention_effect(as_run(clean), self.run)
        if isinstance(result, NotApplicable):
            raise NotAvailable(result.reason)
        return result.table()

    def logit_lens(self, question: str, depth: int, position: int, turn: int = 0, top_n: int = 5) -> pd.DataFrame:
        """The per-layer logit lens of one position: each layer's state at each iteration through the final norm
        and unembedding of the model the run's manifest names (loaded on the first call, once per object).

        Returns:
            One row per (iteration, layer, rank): ``iteration``, ``layer``, ``rank``, ``token_id``, ``logprob``
            (nats); the last layer's rank 0 is the recorded argmax.

        Raises:
            NotAvailable: the model cannot be loaded (one message naming it), or the position has no full states.
        """

        head = self._once("lens:head", lambda: load_lens_head(self.run.manifest))
        if isinstance(head, NotApplicable):
            raise NotAvailable(f"logit lens: {head.reason}")
        frame = layer_lens(self.run, head, question, depth, position, turn, top_n)
        if isinstance(frame, NotApplicable):
            raise NotAvailable(f"logit lens: {frame.reason}")
        return frame

    # Backwards-compatible names for the two measurements that take a regime.
    def reorg_argmax(self, regime: str = "low") -> pd.DataFrame:
        """tab:reorg_lo_argmax (``regime="low"``) or tab:reorg_st_argmax (``"stable"``), tidy."""
        return self.data(f"reorg_{_regime(regime)}_argmax")

    def reorg_all(self, regime: str = "low") -> pd.DataFrame:
        """tab:reorg_lo_all (``regime="low"``) or tab:reorg_st_all (``"stable"``), tidy."""
        return self.data(f"reorg_{_regime(regime)}_all")


def _computed(measurement: Measurement, analysis: Measured) -> Any:
    """``measurement.compute(analysis)``, a UsageError it raises (the input cannot support it) as a NotApplicable. A
    damaged file is not that: CorruptRunError goes through, so the report and the API refuse the run in one line."""
    try:
        return measurement.compute(analysis)
    except CorruptRunError:
        raise
    except UsageError as err:
        return NotApplicable(" ".join(str(err).split()), measurement.key)


def _measurement_method(measurement: Measurement) -> Callable[[RunAnalysis], pd.DataFrame]:
    def method(self: RunAnalysis) -> pd.DataFrame:
        return self.data(measurement.name)

    method.__name__ = measurement.name
    label = f"{measurement.label}: " if measurement.label else ""
    method.__doc__ = (f"{label}{measurement.title} Tidy data (:meth:`RunAnalysis.data`); columns: "
                      f"{', '.join(measurement.columns)}.")
    return method


class CheckpointAnalysis(Measured):
    """The measurements of an SST checkpoint: its learned blend coefficients (sec:learned_alpha).

    Args:
        checkpoint: the checkpoint folder (``sst_config.json`` + ``sst_state.safetensors``), or None with
            ``missing`` saying why there is none (every measurement is then unavailable with that reason).
        missing: why there is no checkpoint (for the report: a run recorded without one).
    """

    scope = "checkpoint"

    def __init__(self, checkpoint: str | Path | None, missing: str = "no SST checkpoint given (--checkpoint)") -> None:
        super().__init__()
        self.checkpoint = Path(checkpoint) if checkpoint is not None else None
        self.missing = missing

    def __repr__(self) -> str:
        return f"CheckpointAnalysis({self.checkpoint})"

    def alpha_matrix(self) -> Any:
        """:class:`~sst_interp.analyses.checkpoint_figures.AlphaMatrix`: eq:alpha of every layer, read once."""

        if self.checkpoint is None:
            raise UsageError(self.missing)
        return self._once("alpha", lambda: read_alpha(self.checkpoint))


class TrainingAnalysis(Measured):
    """The measurements of training logs: loss curves and alpha statistics over training (app:training_curves).

    Args:
        sst: the SST's training output folder (``train_log.csv``, ``alpha_log.csv``), or None.
        baseline: the matched baseline's training output folder (``train_log.csv``), or None.
    """

    scope = "training"

    def __init__(self, sst: str | Path | None = None, baseline: str | Path | None = None) -> None:
        super().__init__()
        self.sst = Path(sst) if sst is not None else None
        self.baseline = Path(baseline) if baseline is not None else None

    def __repr__(self) -> str:
        return f"TrainingAnalysis(sst={self.sst}, baseline={self.baseline})"


class ExperimentAnalysis(Measured):
    """The tables and figure of an intervention experiment folder (``python -m sst_interp.intervene ... --out``).

    Args:
        folder: the experiment folder (``experiment-<kind>.json`` and its tables).
    """

    scope = "experiment"

    def __init__(self, folder: str | Path) -> None:
        super().__init__()
        self.folder = Path(folder)

    def __repr__(self) -> str:
        return f"ExperimentAnalysis({self.folder})"


def _regime(name: str) -> str:
    if name not in ("low", "stable"):
        raise UsageError(f"regime must be 'low' or 'stable', got {name!r}")
    return "lo" if name == "low" else "st"


def open_run(run: str | Path | Run, baseline: str | Path | Run | None = None, baseline_depth: int | None = None,
             name: str | None = None, alpha: Any = None, probe: str | Path | None = None,
             dictionary: str | Path | None = None) -> RunAnalysis:
    """The paper's measurements of one run (``study.open``): a :class:`RunAnalysis`.

    Args:
        run: the run directory (``python -m sst_interp.record --out``), or a :class:`~sst_interp.store.Run`.
        baseline: the matched baseline run (a path or a Run), for tab:main_results and the baseline rows of
            tab:overthinking and tab:repetition.
        baseline_depth: the baseline's depth (default: its only, or shallowest, depth).
        name: the benchmark name in multi-benchmark tables (default: the manifest's ``questions``).
        alpha: the checkpoint's blend coefficients [L, d] (or a function returning them), for
            tab:precision_proof's analytic bound.
        probe: a halting probe saved by ``python -m sst_interp.probe train``, for the probe's tables (without one
            they train a 10-neuron probe on the run's MUST HALT labels, which needs at least 2 such questions).
        dictionary: a sparse dictionary folder saved by ``python -m sst_interp.features train`` (shared or
            per-iteration), for the feature measurements (``a.feature_sets()``, ``a.feature_basin_shifts()``,
            ``a.feature_trajectories()``).

    Then ``a.available()`` (what this run supports, and why not the rest), ``a.data(label)`` (tidy data;
    ``question=``/``depth=`` for a figure's question), ``a.table(label)``, ``a.notes(label)``, one method per
    measurement (``a.staged_breakdown()``), and ``a.measurements()`` (every label with its title and columns).
    """
    return RunAnalysis(run, baseline, baseline_depth=baseline_depth, name=name, alpha=alpha, probe=probe,
                       dictionary=dictionary)


def open_checkpoint(checkpoint: str | Path) -> CheckpointAnalysis:
    """:class:`CheckpointAnalysis` of an SST checkpoint folder (``study.open_checkpoint``)."""
    folder = Path(checkpoint)
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder; pass an SST checkpoint folder (sst_config.json + "
                         f"sst_state.safetensors)")
    return CheckpointAnalysis(folder)


def open_experiment(folder: str | Path) -> ExperimentAnalysis:
    """:class:`ExperimentAnalysis` of an intervention experiment folder (``study.open_experiment``)."""
    if not Path(folder).is_dir():
        raise UsageError(f"{folder} is not a folder; pass the --out of python -m sst_interp.intervene")
    return ExperimentAnalysis(folder)


def open_training(sst: str | Path | None = None, baseline: str | Path | None = None) -> TrainingAnalysis:
    """:class:`TrainingAnalysis` of training output folders (``study.open_training``)."""
    for name, folder in (("sst", sst), ("baseline", baseline)):
        if folder is not None and not (Path(folder) / "train_log.csv").is_file():
            raise UsageError(f"{name}={folder} has no train_log.csv; pass a training output folder")
    return TrainingAnalysis(sst, baseline)
