"""The comparison object: several recorded runs, training folders and published accuracies, compared (scope
``comparison``)::

    from sst_interp import study
    c = study.open_comparison(runs=["runs/main", "runs/nobias", "runs/ema"], baseline="runs/base",
                              training=["train/sst", "train/nobias", "train/base"], external="gpqa")
    c.available()                         # which of them these inputs support, and why not the rest
    c.table("tab:alpha_init_ablation")     # the paper's layout

Its measurements, their requirements and the input checks are declared with their family in
:mod:`sst_interp.analyses.comparisons`, which the catalogue gathers; this object looks them up like every other
analysis object (:class:`~sst_interp.study.objects.Measured`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sst_interp.analyses import ablation
from sst_interp.analyses.comparisons import external_path, training_roles
from sst_interp.store import Run
from sst_interp.study.objects import Measured, as_run


class ComparisonAnalysis(Measured):
    """Several recorded runs, training folders and published accuracies, compared.

    Args:
        runs: SST runs (name -> Run or path; a sequence is named by directory name).
        baselines: run name -> its matched baseline run; or one baseline (a Run or a path) for every run.
        training: training output folders (``python -m sst_interp.train --out``).
        external: a CSV of published accuracies (``model, parameters, accuracy, prompting, source``) or a shipped
            name (gsm8k, gpqa).
        benchmarks: run name -> the benchmark its table rows name (default: the manifest's ``questions`` key).
    """

    scope = "comparison"

    def __init__(self, runs: Mapping[str, Any] | Sequence[Any] = (), baselines: Any = None,
                 training: Sequence[str | Path] = (), external: str | Path | None = None,
                 benchmarks: Mapping[str, str] | None = None) -> None:
        super().__init__()
        if isinstance(runs, Mapping):
            named = {str(k): as_run(v) for k, v in runs.items()}
        else:
            opened = [as_run(r) for r in runs]
            named = {Path(r.path).name: r for r in opened}
        self.runs: dict[str, Run] = named
        if baselines is None or isinstance(baselines, Mapping):
            self.baselines = {k: as_run(v) for k, v in (baselines or {}).items()}
        else:
            one = as_run(baselines)
            self.baselines = {name: one for name in named}
        self.training = [Path(p) for p in training]
        self.external = external if external is None else external_path(external)
        self.benchmarks = dict(benchmarks or {name: str(r.manifest.get("questions") or name)
                                              for name, r in named.items()})

    def __repr__(self) -> str:
        return (f"ComparisonAnalysis(runs={list(self.runs)}, training={[str(p) for p in self.training]}, "
                f"external={self.external})")

    @property
    def pairs(self) -> ablation.AblationPairs:
        """Each ablation variant's main run (refuses runs recorded under different conditions)."""
        return self.memo("pairs", lambda: ablation.pair_runs(self.runs))

    @property
    def trainings(self) -> dict[str, Path]:
        """role -> training folder."""
        return self.memo("trainings", lambda: training_roles(self.training))



def open_comparison(runs: Any = (), baseline: Any = None, training: Sequence[str | Path] = (),
                    external: str | Path | None = None) -> ComparisonAnalysis:
    """:class:`ComparisonAnalysis` (``study.open_comparison``)."""
    return ComparisonAnalysis(runs, baseline, training, external)
