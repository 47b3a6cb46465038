"""The inputs a :class:`~sst_interp.reporting.config.ReportConfig` resolves to (:class:`ReportInputs`), opened and checked.

Resolution rules (each failure is a one-line :class:`~sst_interp.kernels.errors.UsageError`):

- ``runs``: each path is a run directory (has ``manifest.json``) or a folder of run directories (every
  sub-directory with a manifest, sorted by name). No path at all means the most recently modified run under
  ``runs_root`` (``runs/``). A path given as a baseline is never also treated as an SST run.
- ``baselines``: run directories of matched fine-tuned baselines. Each SST run is paired with the baseline that
  shares the most question ids with it (ties: the first given); a run sharing none has no baseline.
- ``checkpoint``: an SST checkpoint folder for the alpha figures; default: the checkpoint each run's manifest
  names (``identity.checkpoint``), when that folder exists.
- ``training_logs``: training output folders (``train_log.csv``, plus ``alpha_log.csv`` for an SST) or
  ``train_log.csv`` files. A log with ``alpha_log.csv`` beside it, or a non-empty ``lr_sst`` column, is the SST's;
  otherwise the baseline's. At most one of each. A folder with ``train_config.json`` is sorted by its config
  instead (:func:`sst_interp.analyses.comparisons.training_role`): ``--baseline`` runs are the baseline's, an SST
  at the paper's theta_init with the direct update is the SST's, and an ablation variant (``--theta-init 0``,
  ``--update ema_linked``) joins ``variants`` (at most one per role).
- ``external``: a CSV of published accuracies or a shipped name (gsm8k, gpqa); a malformed file is refused.
- Runs of different SST architectures (an ablation set) must be recorded under the same conditions
  (:func:`sst_interp.analyses.ablation.pair_runs`); otherwise the report is refused before anything is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from sst_interp.analyses.ablation import MAIN, pair_runs
from sst_interp.analyses.comparisons import BASELINE, external_path, training_role
from sst_interp.checkpoints import resolve_checkpoint, resolve_model
from sst_interp.experiments.manifest import kinds_in, read_manifest
from sst_interp.kernels.errors import UsageError
from sst_interp.reporting.config import ReportConfig
from sst_interp.store import Run

MANIFEST = "manifest.json"
TRAIN_LOG = "train_log.csv"
ALPHA_LOG = "alpha_log.csv"


@dataclass(frozen=True)
class RunInput:
    """One opened run and how the report names it.

    Args:
        name: short name used in artefact names (sanitised directory name, unique among the runs).
        path: the run directory.
        run: the opened :class:`~sst_interp.store.Run`.
        benchmark: the benchmark label shown in tables (manifest ``questions`` key, else ``name``).
    """

    name: str
    path: Path
    run: Run
    benchmark: str


@dataclass(frozen=True)
class TrainingLogs:
    """Training logs of the SST and of the matched baseline (each optional).

    Args:
        sst: folder holding the SST's ``train_log.csv`` (and ``alpha_log.csv``), or None.
        baseline: folder holding the baseline's ``train_log.csv``, or None.
        variants: the ablation variants' training folders (``--theta-init 0``, ``--update ema_linked``).
    """

    sst: Path | None = None
    baseline: Path | None = None
    variants: tuple[Path, ...] = ()

    @property
    def given(self) -> bool:
        """True when any log was given."""
        return self.sst is not None or self.baseline is not None or bool(self.variants)

    @property
    def folders(self) -> list[Path]:
        """Every training folder given: the SST's, the baseline's, the variants'."""
        return [p for p in (self.sst, self.baseline, *self.variants) if p is not None]


@dataclass(frozen=True)
class ReportInputs:
    """Everything the artefacts read, resolved and validated.

    Args:
        runs: the SST runs, in the order given.
        baselines: {run name: the matched baseline run}.
        probe: saved probe path or None.
        dictionary: sparse dictionary folder or None.
        checkpoints: {run name: SST checkpoint folder} (runs without one are absent).
        missing_checkpoints: {run name: why no checkpoint} for runs without one.
        training: the training logs.
        out: the output folder.
        experiments: intervention experiment folders (each holds at least one ``experiment-<kind>.json``).
        external: the checked CSV of published accuracies, or None.
    """

    runs: tuple[RunInput, ...]
    baselines: dict[str, RunInput] = field(default_factory=dict)
    probe: Path | None = None
    dictionary: Path | None = None
    checkpoints: dict[str, Path] = field(default_factory=dict)
    missing_checkpoints: dict[str, str] = field(default_factory=dict)
    training: TrainingLogs = TrainingLogs()
    out: Path = Path("reports")
    experiments: tuple[Path, ...] = ()
    external: Path | None = None

    def run(self, name: str) -> RunInput:
        """The run called ``name``."""
        for item in self.runs:
            if item.name == name:
                return item
        raise KeyError(name)


def _is_run(path: Path) -> bool:
    return (path / MANIFEST).is_file()


def latest_run(root: Path) -> Path:
    """The run directory under ``root`` whose manifest was modified last."""
    if not root.is_dir():
        raise UsageError(f"no run given and {root}/ does not exist; pass --run RUN_DIR (a `record` output)")
    candidates = [p for p in root.iterdir() if p.is_dir() and _is_run(p)]
    if not candidates:
        raise UsageError(f"no run directory under {root}/; record one first or pass --run RUN_DIR")
    return max(candidates, key=lambda p: ((p / MANIFEST).stat().st_mtime_ns, p.name))


def expand_run_paths(paths: tuple[Path, ...], root: Path) -> list[Path]:
    """Run directories from ``paths`` (runs or folders of runs); the latest under ``root`` when empty."""
    if not paths:
        return [latest_run(root)]
    out: list[Path] = []
    for path in paths:
        if not path.exists():
            raise UsageError(f"run {path} does not exist; pass a run directory written by `record`")
        if _is_run(path):
            out.append(path)
            continue
        inner = sorted(p for p in path.iterdir() if p.is_dir() and _is_run(p)) if path.is_dir() else []
        if not inner:
            raise UsageError(f"{path} is not a run directory (no {MANIFEST}) and holds none; pass the --out of a "
                             "record run or a folder of them")
        out.extend(inner)
    return out


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]+", "_", text).strip("_") or "run"


def _unique_names(paths: list[Path]) -> list[str]:
    names = [_safe_name(p.name) for p in paths]
    for i, name in enumerate(names):
        if names.count(name) > 1:
            names[i] = _safe_name(f"{paths[i].parent.name}_{paths[i].name}")
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            names[i] = f"{name}_{seen[name]}"
    return names


def _benchmark(run: Run, name: str) -> str:
    label = run.manifest.get("questions")
    return str(label) if isinstance(label, str) and label else name


def _open_runs(paths: list[Path]) -> list[RunInput]:
    out = []
    for name, path in zip(_unique_names(paths), paths):
        run = Run.open(path).check_files()  # a file that fails verification is refused before any artefact
        out.append(RunInput(name, path, run, _benchmark(run, name)))
    return out


def _match_baselines(runs: list[RunInput], baselines: list[RunInput]) -> dict[str, RunInput]:
    pairs: dict[str, RunInput] = {}
    for item in runs:
        ids = set(item.run.question_ids(item.run.depths[0])) if item.run.depths else set()
        best, best_shared = None, 0
        for base in baselines:
            shared = len(ids & {q for d in base.run.depths for q in base.run.question_ids(d)})
            if shared > best_shared:
                best, best_shared = base, shared
        if best is not None:
            pairs[item.name] = best
    return pairs


def _checkpoints(runs: list[RunInput], given: Path | None) -> tuple[dict[str, Path], dict[str, str]]:
    found: dict[str, Path] = {}
    missing: dict[str, str] = {}
    if given is not None:
        if not (given / "sst_config.json").is_file() or not (given / "sst_state.safetensors").is_file():
            raise UsageError(f"--checkpoint {given} is not an SST checkpoint folder (needs sst_config.json and "
                             "sst_state.safetensors)")
        return {item.name: given for item in runs}, missing
    for item in runs:
        named = (item.run.manifest.get("identity") or {}).get("checkpoint")
        family = item.run.manifest.get("family")
        if family is not None and family != "sst":
            missing[item.name] = f"a {family} run has no SST checkpoint: the blend coefficients alpha are SST's"
        elif not named:
            missing[item.name] = ("the run's manifest names no SST checkpoint (an untrained SST) and no "
                                  "--checkpoint was given")
        elif not (Path(named) / "sst_state.safetensors").is_file():
            missing[item.name] = (f"the checkpoint the manifest names ({named}) is not on this machine; pass "
                                  "--checkpoint")
        else:
            found[item.name] = Path(named)
    return found, missing


def _log_folder(path: Path) -> Path:
    if path.is_file() and path.name == TRAIN_LOG:
        return path.parent
    if path.is_dir() and (path / TRAIN_LOG).is_file():
        return path
    raise UsageError(f"--training-log {path} is neither a {TRAIN_LOG} file nor a folder holding one; pass the "
                     "training output folder")


def _is_sst_log(folder: Path) -> bool:
    if (folder / ALPHA_LOG).is_file():
        return True
    try:
        log = pd.read_csv(folder / TRAIN_LOG)
    except (OSError, ValueError, pd.errors.ParserError) as err:
        raise UsageError(f"{folder / TRAIN_LOG} is not a readable CSV ({err}); pass a training output folder") from err
    return "lr_sst" in log.columns and bool(log["lr_sst"].notna().any())


def resolve_training_logs(paths: tuple[Path, ...]) -> TrainingLogs:
    """Sort the given logs into the SST's and the baseline's (see module docstring)."""
    sst: Path | None = None
    baseline: Path | None = None
    variants: dict[str, Path] = {}
    for path in paths:
        folder = _log_folder(path)
        role = training_role(folder)[0] if (folder / "train_config.json").is_file() else None
        if role not in (None, MAIN, BASELINE):
            if role in variants:
                raise UsageError(f"two {role} training logs given ({variants[role]}, {folder}); pass one per "
                                 f"variant (the role is read from each folder's train_config.json)")
            variants[role] = folder
            continue
        if role == MAIN or (role is None and _is_sst_log(folder)):
            if sst is not None:
                raise UsageError(f"two SST training logs given ({sst}, {folder}); pass at most one SST and one "
                                 "baseline log")
            sst = folder
        else:
            if baseline is not None:
                raise UsageError(f"two baseline training logs given ({baseline}, {folder}); pass at most one SST "
                                 "and one baseline log")
            baseline = folder
    return TrainingLogs(sst, baseline, tuple(variants.values()))


def resolve_inputs(config: ReportConfig) -> ReportInputs:
    """Open and validate every input of ``config`` (UsageError on bad input)."""
    base_paths = [Path(p) for p in config.baselines]
    for path in base_paths:
        if not path.exists() or not _is_run(path):
            raise UsageError(f"baseline {path} is not a run directory (no {MANIFEST}); pass the --out of a record run")
    resolved_bases = {p.resolve() for p in base_paths}
    run_paths = [p for p in expand_run_paths(tuple(Path(p) for p in config.runs), Path(config.runs_root))
                 if p.resolve() not in resolved_bases]
    if not run_paths:
        raise UsageError("every run given is also a --baseline; pass the SST run with --run")
    runs = _open_runs(run_paths)
    baselines = [RunInput(n, p, Run.open(p).check_files(), n)
                 for n, p in zip(_unique_names(base_paths), base_paths)]
    if config.probe is not None and not Path(config.probe).exists():
        raise UsageError(f"--probe {config.probe} does not exist; pass a probe folder saved by "
                         "`python -m sst_interp.probe train`")
    if config.dictionary is not None and not Path(config.dictionary).is_dir():
        raise UsageError(f"--dictionary {config.dictionary} is not a folder; pass a dictionary folder saved by "
                         "`python -m sst_interp.features train`")
    checkpoints, missing = _checkpoints(runs, _named(config.checkpoint))
    pair_runs({item.name: item.run for item in runs})  # an ablation set recorded under other conditions: refused
    external = external_path(config.external) if config.external is not None else None
    return ReportInputs(
        runs=tuple(runs),
        baselines=_match_baselines(runs, baselines),
        probe=Path(config.probe) if config.probe is not None else None,
        dictionary=Path(config.dictionary) if config.dictionary is not None else None,
        checkpoints=checkpoints,
        missing_checkpoints=missing,
        training=resolve_training_logs(tuple(_named(p) for p in config.training_logs)),
        out=Path(config.out),
        experiments=resolve_experiments(tuple(Path(p) for p in config.experiments)),
        external=external,
    )


def _named(path: Path | str | None) -> Path | None:
    """A named checkpoint (demo-codeact, ...) or named model (hops-organism) as its installed folder; other paths
    unchanged."""
    return None if path is None else Path(resolve_model(resolve_checkpoint(path)))


def resolve_experiments(paths: tuple[Path, ...]) -> tuple[Path, ...]:
    """The intervention experiment folders; a path holding no experiment manifest is a UsageError."""
    for path in paths:
        kinds = kinds_in(path) if path.is_dir() else []
        if not kinds:
            raise UsageError(f"--experiment {path} holds no experiment-*.json; pass the --out of "
                             f"python -m sst_interp.intervene window|trace|steer")
        for kind in kinds:
            read_manifest(path, kind)  # a damaged manifest stops the report before anything is written
    return paths
