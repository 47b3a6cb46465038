"""Measurements that compare several recorded runs or trainings (scope ``comparison``): the architectural ablations
(tab:alpha_init_ablation, tab:ema_variant_ablation), the training configurations (tab:hyperparameters), the loss
comparisons (fig:sst_vs_nobias_loss, fig:sst_vs_baseline_training_loss, fig:sst_vs_baseline_validation_loss) and
the external comparisons (tab:external_gsm8k, tab:external_gpqa)::

    from sst_interp import study
    c = study.open_comparison(runs=["runs/main", "runs/nobias", "runs/ema"], baseline="runs/base",
                             training=["train/sst", "train/nobias", "train/base"], external="gpqa")
    c.available()                         # which of them these inputs support, and why not the rest
    c.table("tab:alpha_init_ablation")     # the paper's layout

Which run or training is the main SST, a variant or the baseline is read from its own configuration (the run's
manifest ``sst`` block, the training folder's ``train_config.json``), never from names
(:mod:`sst_interp.analyses.ablation`). The entries and their requirements are declared here (:data:`MEASUREMENTS`,
:data:`REQUIREMENTS`); :mod:`sst_interp.catalogue` gathers them with every other family's. Their computations
take any object with the attributes of :class:`Compared`: the analysis object
:class:`sst_interp.study.comparison.ComparisonAnalysis`, which sits above the catalogue.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from sst_interp.analyses import ablation, external, sections, tidy
from sst_interp.analyses import hyperparameters as hp
from sst_interp.analyses.checkpoint_figures import train_log
from sst_interp.analyses.figure_data import FigureData
from sst_interp.analyses.measurement import Measurement
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.outcomes import correctness_matrix
from sst_interp.kernels.results import NotApplicable
from sst_interp.store import Run

BASELINE = ablation.BASELINE
TRAIN_LOG = "train_log.csv"
ALPHA_LOG = "alpha_log.csv"


class Compared(Protocol):
    """What the comparison measurements read from their analysis object
    (:class:`sst_interp.study.comparison.ComparisonAnalysis`)."""

    runs: dict[str, Run]
    baselines: dict[str, Run]
    training: list[Path]
    external: Path | None
    benchmarks: dict[str, str]

    @property
    def pairs(self) -> ablation.AblationPairs: ...

    @property
    def trainings(self) -> dict[str, Path]: ...

    def memo(self, key: str, build: Any) -> Any: ...


# ------------------------------------------------------------------------------------------------ trainings
def training_role(folder: Path) -> tuple[str, str]:
    """(role, curve label) of a training output folder: ``baseline``, or an SST role of
    :mod:`~sst_interp.analyses.ablation` from its ``train_config.json``; a folder without one (a bare
    ``train_log.csv``) is the main SST when ``alpha_log.csv`` is beside it, else the baseline."""
    saved = hp.read_training_run(folder)
    if saved is None:
        return (ablation.MAIN, "SST") if (folder / ALPHA_LOG).is_file() else (BASELINE, "baseline")
    if saved.is_baseline:
        return BASELINE, "baseline (LoRA only, one pass)"
    layers = saved.config.get("sst_layers")
    arch = ablation.Architecture(float(saved.config["theta_init"]), str(saved.config["update"]),
                                 str(saved.config.get("state_scale", ablation.PAPER_STATE_SCALE)),
                                 None if layers is None else tuple(int(x) for x in layers))
    return arch.role, f"SST ({arch.describe()})"


def training_roles(folders: Sequence[Path]) -> dict[str, Path]:
    """role -> training folder (main, alpha_init, ema_variant, other, baseline).

    Raises:
        UsageError: two folders of one role (the line names both).
    """
    out: dict[str, Path] = {}
    for folder in folders:
        role = training_role(Path(folder))[0]
        if role in out:
            raise UsageError(f"two {role} training logs given ({out[role]}, {folder}); pass one per role (the role "
                             f"is read from each folder's train_config.json)")
        out[role] = Path(folder)
    return out


# ------------------------------------------------------------------------------------------------ inputs
def external_path(value: str | Path) -> Path:
    """``--external``'s value as a checked CSV path (:func:`~sst_interp.analyses.external.read_external` raises on a
    malformed file)."""
    path = external.resolve_external(value)
    external.read_external(path)
    return path


# ------------------------------------------------------------------------------------------------ requirements
def _pair(role: str):
    def check(c: Compared) -> str | None:
        if role in c.pairs.pairs:
            return None
        variant = role.replace("_", " ").removesuffix(" variant")  # "alpha init", "ema"
        return (f"needs an ablation pair: an SST run trained as the {variant} variant "
                f"({ablation.HOW[role]}) recorded on the same questions, protocol and depths as a main SST run "
                f"(theta_init=-1.8, direct update); runs given: {c.pairs.listing()}")

    return check


def _logs(*roles: str):
    def check(c: Compared) -> str | None:
        found = c.trainings
        missing = [r for r in roles if r not in found]
        if not missing:
            return None
        what = {ablation.MAIN: "the main SST's (theta_init=-1.8, direct update)", BASELINE: "the baseline's",
                ablation.ALPHA_INIT: "the no-bias variant's (train --theta-init 0)"}
        return (f"needs training logs (--training-log): {', '.join(what[r] for r in missing)} missing; given: "
                f"{', '.join(f'{k} {v}' for k, v in found.items()) or 'none'}")

    return check


def _configs(c: Compared) -> str | None:
    unmet = _logs(ablation.MAIN, BASELINE)(c)
    if unmet is not None:
        return unmet
    bare = [str(c.trainings[r]) for r in (ablation.MAIN, BASELINE)
            if not (c.trainings[r] / hp.TRAIN_CONFIG).is_file()]
    return f"{', '.join(bare)} holds no {hp.TRAIN_CONFIG}; pass the training output folder" if bare else None


def _external(c: Compared) -> str | None:
    return None if c.external is not None else ("needs --external CSV (published accuracies: model, parameters, "
                                                "accuracy, prompting, source; or a shipped name: gsm8k, gpqa)")


#: This family's declarative requirements (beside :data:`sst_interp.analyses.measurement.REQUIREMENTS`).
REQUIREMENTS = {"ablation_alpha_init": _pair(ablation.ALPHA_INIT), "ablation_ema_variant": _pair(ablation.EMA_VARIANT),
                "nobias_logs": _logs(ablation.MAIN, ablation.ALPHA_INIT),
                "sst_baseline_logs": _logs(ablation.MAIN, BASELINE), "training_configs": _configs,
                "external": _external}


# ------------------------------------------------------------------------------------------------ computations
def _ablation(role: str):
    def compute(c: Compared) -> Any:
        variant, main = c.pairs.pairs[role]
        base = c.baselines.get(main)
        depth = min(base.depths) if base is not None else None
        return ablation.ablation_table(role, c.runs[main], c.runs[variant], base, depth)

    return compute


def _ablation_notes(c: Compared, r: ablation.AblationTable) -> list[str]:
    role = r.role
    variant, main = c.pairs.pairs[role]
    notes = [f"main SST: run {main} ({r.main.describe()}); variant: run {variant} ({r.variant.describe()}); "
             f"roles read from each run's SST config", f"N = {r.n} questions recorded at every depth by both runs"
             + (" and by the baseline" if r.baseline_correct is not None else ""),
             "iter=i: staged accuracy through stage i (correct at some flat depth <= i); McNemar: exact two-sided, "
             "on the paired flips at each stage (p = 1 without a discordant pair)"]
    if r.baseline_correct is None:
        notes.append("no --baseline run matched the main SST: the baseline rows are omitted")
    else:
        notes.append(f"baseline: its depth-{r.baseline_depth} run; Delta vs baseline compares each stage with it")
    hidden = [d for d in r.depths if d not in r.shown]
    if hidden:
        notes.append(f"stages {hidden} are in the tidy data (c.data(...)), not in the paper's layout")
    return notes


def _trainings_of(c: Compared, roles: Sequence[str]) -> dict[str, Path]:
    return {training_role(c.trainings[r])[1]: c.trainings[r] for r in roles if r in c.trainings}


def _losses(roles: Sequence[str], panel: str):
    def compute(c: Compared) -> FigureData:
        chosen = _trainings_of(c, roles)
        tables = {label: train_log(folder) for label, folder in chosen.items()}
        return FigureData(tables, {"series": list(tables), "panel": panel,
                                   "roles": [r for r in roles if r in c.trainings],
                                   "notes": [f"{label}: {folder}" for label, folder in chosen.items()]})

    return compute


def _losses_tidy(result: FigureData) -> pd.DataFrame:
    long = pd.concat([frame.assign(model=name) for name, frame in result.tables.items()], ignore_index=True)
    return tidy.renamed(long[["model", "step", "train_loss", "val_loss"]], {})


def _hyperparameters(c: Compared) -> hp.Hyperparameters:
    order = [ablation.MAIN, BASELINE, ablation.ALPHA_INIT, ablation.EMA_VARIANT, ablation.OTHER]
    runs = {}
    for role in order:
        folder = c.trainings.get(role)
        saved = hp.read_training_run(folder) if folder is not None else None
        if saved is not None:
            runs[training_role(folder)[1]] = saved
    return hp.hyperparameters(runs)


#: the ablation variants are compared in their own tables; every other run given is placed, named by its kind
_NOT_PLACED = frozenset({ablation.ALPHA_INIT, ablation.EMA_VARIANT})


def _placed(c: Compared, label: str) -> list[str]:
    return [name for name in c.runs if external.benchmark_table(c.benchmarks[name]) == label
            and ablation.role_of(c.runs[name]) not in _NOT_PLACED]


def _external_table(label: str):
    def compute(c: Compared) -> Any:
        names = _placed(c, label)
        if not names:
            wanted = {"tab:external_gsm8k": "GSM8K", "tab:external_gpqa": "GPQA"}.get(label)
            benches = ", ".join(f"{n}: {c.benchmarks[n]}" for n in c.runs) or "none"
            what = (f"a run on {wanted}" if wanted else "a run on a benchmark the paper has no table for") \
                + " that is not an ablation variant"
            return NotApplicable(f"needs {what}; runs given: {benches}", label or "tab_external_comparison")
        rows = []
        for name in names:
            run = c.runs[name]
            matrix = correctness_matrix(run)
            model = (run.manifest.get("identity") or {}).get("model") or run.manifest.get("model") or "the backbone"
            # a baseline's iterations change nothing (no state stream): its "staged compute" is its one accuracy
            how = "" if ablation.role_of(run) == ablation.BASELINE else f" staged compute i_max={max(matrix.columns)}"
            rows.append({"model": f"{ablation.run_label(run)}{how} on {model} [run {name}]",
                         "parameters": "not recorded", "accuracy": 100.0 * float(matrix.any(axis=1).mean()),
                         "prompting": f"{run.manifest.get('prompt_mode')} prompt, greedy, "
                                      f"{run.manifest.get('protocol', 'completion')}",
                         "source": f"recorded: {run.path} (N = {len(matrix)})"})
        return external.ExternalComparison(external.read_external(c.external), pd.DataFrame(rows), str(c.external),
                                           label)

    return compute


def _external_notes(c: Compared, r: external.ExternalComparison) -> list[str]:
    notes = [f"rows of kind 'published' are accuracies reported by their sources, read from {r.csv_path}; they are "
             f"published figures under their own protocols, not recorded by this tool",
             "the row of kind 'recorded' is this run's staged-compute capacity (correct at some recorded depth)"]
    if not r.paper_label:
        notes.append("the run's benchmark has no table in the paper: the published rows are whatever --external "
                     "holds and need not be of the same benchmark")
    return notes


ABLATION_DOC = {"stage": "the deepest depth allowed", "n_questions": "questions compared",
                "main_accuracy_pct": "main SST staged accuracy", "variant_accuracy_pct": "variant staged accuracy",
                "baseline_accuracy_pct": "matched baseline accuracy (NaN without one)",
                "delta_vs_main_pp": "variant minus main SST, points", "variant_only_vs_main": "questions only the "
                "variant answers", "main_only": "questions only the main SST answers", "mcnemar_exact_p_vs_main":
                "exact McNemar p", "delta_vs_baseline_pp": "variant minus baseline, points",
                "variant_only_vs_baseline": "questions the variant answers and the baseline misses",
                "baseline_only": "the reverse", "mcnemar_exact_p_vs_baseline": "exact McNemar p"}
LOSS_DOC = {"model": "the training's config (SST settings, or baseline)", "step": "optimiser step",
            "train_loss": "training loss (nats per token)", "val_loss": "validation loss, NaN between validations"}
HYPER_DOC = {"group": "the paper's group", "hyperparameter": "the paper's row", "...": "one text column per training "
             "run, named by its config"}
EXTERNAL_DOC = {"model": "model", "parameters": "parameter count as published", "accuracy_pct": "accuracy, percent",
                "prompting": "prompting and decoding conditions", "source": "the citation, or the recorded run",
                "kind": "published or recorded"}


def _ablation_entry(role: str, caption: str) -> Measurement:
    label = ablation.LABELS[role]
    title = {ablation.ALPHA_INIT: "Main SST against the unbiased alpha initialisation: staged accuracy, deltas, "
                                  "McNemar.",
             ablation.EMA_VARIANT: "Main SST against the linked-blend EMA variant: staged accuracy, deltas, "
                                   "McNemar."}[role]
    return Measurement(name=label.split(":")[1], label=label, title=title, requires=(f"ablation_{role}",),
                       compute=_ablation(role), tidy=lambda r: tidy.renamed(r.stages(), {}), columns=ABLATION_DOC,
                       notes=_ablation_notes, scope="comparison", family=sections.ABLATIONS_AND_EXTERNAL,
                       inputs=("runs", "baseline"), caption=caption)


MEASUREMENTS: tuple[Measurement, ...] = (
    _ablation_entry(ablation.ALPHA_INIT, "Alpha initialisation ablation (staged compute): the SST with theta_init = "
                    "-1.8 against the unbiased initialisation, per iteration stage, with the deltas and exact "
                    "McNemar tests on the paired flips."),
    _ablation_entry(ablation.EMA_VARIANT, "Linked blend EMA variant (staged compute): the SST with the direct update "
                    "against the EMA variant, with the matched baseline, the deltas and exact McNemar tests on the "
                    "paired flips."),
    Measurement(name="hyperparameters", label="tab:hyperparameters", title="The training configurations of the SST and "
                "the baseline side by side, from their saved configs.", requires=("training_configs",),
                compute=_hyperparameters, tidy=lambda r: tidy.renamed(r.table(), {}), columns=HYPER_DOC,
                notes=lambda c, r: r.notes(), scope="comparison", family=sections.ALPHA_AND_TRAINING,
                inputs=("training",), caption="Training hyperparameters of the SST and the matched baseline side by "
                "side, from their saved configs."),
    Measurement(name="sst_vs_nobias_loss", label="fig:sst_vs_nobias_loss", title="Training and validation loss of the "
                "SST and the no-bias variant.", requires=("nobias_logs",),
                compute=_losses((ablation.MAIN, ablation.ALPHA_INIT), "both"), tidy=_losses_tidy, columns=LOSS_DOC,
                kind="figure", scope="comparison", family=sections.ALPHA_AND_TRAINING, figure="loss_pair",
                inputs=("training",), caption="SST vs the no-bias variant: training loss (raw, light; moving average, "
                "solid) and validation loss, each curve labelled by its config."),
    Measurement(name="sst_vs_baseline_training_loss", label="fig:sst_vs_baseline_training_loss", title="Training loss "
                "of the SST and the matched baseline.", requires=("sst_baseline_logs",),
                compute=_losses((ablation.MAIN, BASELINE), "train"), tidy=_losses_tidy, columns=LOSS_DOC, kind="figure",
                scope="comparison", family=sections.ALPHA_AND_TRAINING, figure="training_loss", inputs=("training",),
                caption="SST vs matched baseline: training loss, raw (light) and moving average (solid)."),
    Measurement(name="sst_vs_baseline_validation_loss", label="fig:sst_vs_baseline_validation_loss", title="Validation "
                "loss of the SST and the matched baseline.", requires=("sst_baseline_logs",),
                compute=_losses((ablation.MAIN, BASELINE), "val"), tidy=_losses_tidy, columns=LOSS_DOC, kind="figure",
                scope="comparison", family=sections.ALPHA_AND_TRAINING, figure="validation_loss", inputs=("training",),
                caption="SST vs matched baseline: validation loss as evaluated."),
    Measurement(name="external_gsm8k", label="tab:external_gsm8k", title="The SST's staged accuracy among published "
                "GSM8K results.", requires=("external",), compute=_external_table("tab:external_gsm8k"),
                tidy=lambda r: tidy.renamed(r.table(), {}), columns=EXTERNAL_DOC, notes=_external_notes,
                scope="comparison", family=sections.ABLATIONS_AND_EXTERNAL, inputs=("runs", "external"),
                caption="External comparison on GSM8K: the SST's staged accuracy among published results (published, "
                "not recorded)."),
    Measurement(name="external_gpqa", label="tab:external_gpqa", title="The SST's staged accuracy among published "
                "GPQA-Diamond results.", requires=("external",), compute=_external_table("tab:external_gpqa"),
                tidy=lambda r: tidy.renamed(r.table(), {}), columns=EXTERNAL_DOC, notes=_external_notes,
                scope="comparison", family=sections.ABLATIONS_AND_EXTERNAL, inputs=("runs", "external"),
                caption="External comparison on GPQA-Diamond: the SST's staged accuracy among published results "
                "(published, not recorded)."),
    Measurement(name="external_comparison", label="", title="A run of another benchmark placed among the --external "
                "rows.", requires=("external",), compute=_external_table(""),
                tidy=lambda r: tidy.renamed(r.table(), {}), columns=EXTERNAL_DOC, notes=_external_notes,
                scope="comparison", family=sections.ABLATIONS_AND_EXTERNAL, inputs=("runs", "external"), caption="A "
                "run of a benchmark without a paper table placed among the --external rows (published, not recorded)."),
)
