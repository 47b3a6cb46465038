"""Scoring dictionaries per iteration (``python -m sst_interp.features evaluate``): the reconstruction numbers
(:mod:`~sst_interp.features.quality`), the cost of sharing one dictionary over the loop against per-iteration
dictionaries of the same site and width, and the spliced-in accuracy and loss (:mod:`~sst_interp.features.splice`),
as one table with a row per iteration, written as ``quality.csv`` and ``quality.parquet`` with ``evaluation.json``
(what was scored) into the output folder.

The scored questions: on the dictionary's own run, the held-out ones (the sidecar's fraction and seed); on another
run of the same model, all of them. Every refusal (a damaged dictionary, another site or width, an iteration not
covered, a model that cannot be rerun) comes before anything is computed or written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.features.dictionary import DictionarySet
from sst_interp.features.options import EvaluateOptions
from sst_interp.features.quality import reconstruction_quality
from sst_interp.features.sites import StateSite
from sst_interp.features.splice import load_run_model, splice_columns, splice_table
from sst_interp.features.states import site_rows
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.progress import progress
from sst_interp.model.devices import check_device
from sst_interp.outputs import write_output
from sst_interp.store import Run

#: The table's file names in the output folder.
TABLE_FILES = ("quality.csv", "quality.parquet")


@dataclass(frozen=True)
class Evaluation:
    """What ``evaluate`` wrote: the folder, the per-iteration table, and the raw splice rows (None without)."""

    out: Path
    table: pd.DataFrame
    splice: pd.DataFrame | None


def _quality(dictionaries: DictionarySet, run: Run, site: StateSite, ids: list[str], what: str) -> pd.DataFrame:
    parts = progress(site_rows(run, site, dictionaries.split_for(run), question_ids=set(ids)), desc=what, unit="shard")
    return reconstruction_quality(dictionaries, parts, site.iterations)


def _check_against(shared: DictionarySet, against: DictionarySet, iterations: tuple[int, ...]) -> None:
    """Refuse a comparison set of another site or width, or one that is not per-iteration (UsageError)."""
    a, b = shared.meta, against.meta
    if against.layout != "per-iteration":
        raise UsageError(f"--against takes per-iteration dictionaries; {against.path} is {against.layout}")
    if (a.layer, a.layer_name, a.d_in, a.depth) != (b.layer, b.layer_name, b.d_in, b.depth):
        raise UsageError(f"--against {against.path} was trained on another site or width (layer {b.layer}, d = "
                         f"{b.d_in}, depth {b.depth}; the dictionary: layer {a.layer}, d = {a.d_in}, depth {a.depth})")
    if a.width != b.width:
        raise UsageError(f"--against {against.path} has {b.width} features, the dictionary {a.width}: the cost of "
                         f"sharing is compared at equal width")
    missing = [i for i in iterations if i not in against.by_iteration]
    if missing:
        raise UsageError(f"--against {against.path} has no dictionary for iterations {missing}")


def evaluate_dictionaries(options: EvaluateOptions) -> Evaluation:
    """Score the dictionaries ``options`` names and write the table (module docstring)."""
    device = check_device(options.device)
    dictionaries = DictionarySet.load(options.dictionary, device)
    run = Run.open(options.run or dictionaries.meta.run)
    site = dictionaries.site(run, options.layer, options.iterations)
    split = dictionaries.split_for(run)
    recorded = np.asarray(run.question_ids(site.depth), dtype=object)
    ids = [str(q) for q in recorded[split.keep(recorded)]][:options.limit]
    if not ids:
        raise UsageError(f"no question of {run.path} is left to score at depth {site.depth} (the training run's "
                         f"held-out fraction is {dictionaries.meta.holdout}); pass another --run")
    against = DictionarySet.load(options.against, device) if options.against is not None else None
    if against is not None:
        _check_against(dictionaries, against, site.iterations)
    out = options.out or Path(options.dictionary) / "evaluation"
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; pass a folder")
    model = load_run_model(run, options.model, device) if options.splice else None

    table = _quality(dictionaries, run, site, ids, "encode")
    if against is not None:
        other = _quality(against, run, site, ids, "encode --against")
        table["fve_per_iteration"] = other["fve"].to_numpy()
        table["l0_per_iteration"] = other["l0"].to_numpy()
        table["fve_cost"] = table["fve_per_iteration"] - table["fve"]
    splice = None
    if model is not None:
        splice = splice_table(run, dictionaries, site, ids, *model, batch_size=options.batch_size)
        table = table.merge(splice_columns(splice), on="iteration", how="left")
    m = dictionaries.meta
    tokens = [int(dictionaries[i].meta.tokens.get(str(i), 0)) for i in table["iteration"]]
    table.insert(0, "tokens", tokens)
    for name, value in reversed((("layout", m.layout), ("architecture", m.architecture), ("layer", m.layer),
                                 ("width", m.width), ("k", m.k))):
        table.insert(0, name, value)
    _write(out, table, splice, {"dictionary": str(options.dictionary), "run": str(run.path),
                                "questions": "held-out" if split.part == "heldout" else "all",
                                "scored_questions": len(ids), "depth": site.depth,
                                "against": None if options.against is None else str(options.against)})
    return Evaluation(out, table, splice)


def _write(out: Path, table: pd.DataFrame, splice: pd.DataFrame | None, summary: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_output(out / TABLE_FILES[0], table.to_csv(index=False))
    write_output(out / TABLE_FILES[1], table.to_parquet(index=False))
    if splice is not None:
        write_output(out / "splice.csv", splice.to_csv(index=False))
    write_output(out / "evaluation.json", json.dumps(summary, indent=1, sort_keys=True) + "\n")
