"""Experiment a, where the depth gain lives: deny iterations 2..k the state stream in sliding windows of layers.

For depth k and each window W of layers, one condition is recorded at depth k with:

- ``freeze`` (default): the carried state of W's layers is not updated by iterations 1..k-1, so iterations 2..k
  read the state iteration 1 read (the previous position's); iteration k updates it as usual, so later positions
  see a normal hand-over. With W = every layer this is exactly depth 1 (tested): iterations 2..k repeat
  iteration 1 bit for bit.
- ``zero``: ``state_in`` of W's layers is zeroed at iterations 2..k (the blend reads S = 0 there). This is not
  "no stream": h~ = (1 - alpha) h, the residual stream shrunk.
- ``mean`` (a control): iterations 2..k of W's layers read S(mean C) instead of S(C): the state the clean depth-k
  run carried into the same (position, iteration, layer), averaged over every question. The blend keeps its
  scale; only what is specific to the question is taken away.
- ``resample`` (a control): the same with the state another question (drawn with seed 0) carried there in the clean
  depth-k run: a state of the right kind, but the wrong question's.

``mean`` and ``resample`` read the clean run's recorded states, so they act at the positions it holds in full
(``--full-positions``; later positions run as in the clean run) and need the update ``direct``. By default every
window is recorded in the chosen ``mode`` and, beside it, under each of ``controls`` (``mean`` and ``resample``):
the table's ``mode`` column says which.

Per window, against the clean run at depth k over the same questions: accuracy and its change, and the change in
log-probability of the clean depth-k answer's first token (turn 0, position 0, final iteration; censored where it
left the intervened top-K, and then kept as a bound), each with a 95% interval over questions (the accuracy change:
exact, from the flip counts, none below 2 questions; the log-prob change: its median with the exact sign-test
interval, none below 6, and its mean as a number), the flip rate with its Clopper-Pearson interval, and the exact
sign test, none below 6 questions (:mod:`sst_interp.experiments.intervals`,
whose coverage ``bench/bench_interval_coverage.py`` measures), the sign test's p
Holm-adjusted over the windows of every mode, and the exact McNemar test of the flips. The clean depth-1 run is the
reference row (the depth gain that a window could remove).

On a natively looping family (:mod:`sst_interp.experiments.families`) the windows slide over the layers that carry
a state (``loop.freeze_layers``), ``freeze`` keeps their carried state at iterations ``freeze_from .. k-1``, the
``mean``/``resample`` controls replace their output at the same visits, and ``zero`` is refused (no blend input).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pandas as pd

from sst_interp.analyses.intervention_effect import first_token_logprob_bounds
from sst_interp.experiments import families
from sst_interp.experiments import manifest as files
from sst_interp.experiments.configs import READS_CLEAN, WINDOW_MODES, WindowConfig
from sst_interp.experiments.effects import flip_and_logprob_columns, holm, planned_questions
from sst_interp.experiments.families import window_spec as family_window_spec
from sst_interp.experiments.intervals import change_interval
from sst_interp.experiments.setup import Setup, record_condition
from sst_interp.experiments.tables import WINDOW_COLUMNS, WINDOW_TABLE
from sst_interp.interventions import Intervention, InterventionSpec, Operation, Site
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.outcomes import correctness_matrix
from sst_interp.store import Run

WindowMode = Literal["freeze", "zero", "mean", "resample"]
TABLE, COLUMNS = WINDOW_TABLE, WINDOW_COLUMNS


def windows(num_layers: int, size: int, stride: int) -> list[tuple[int, ...]]:
    """Windows of ``size`` consecutive layers starting every ``stride`` layers; a last window ending at the top
    layer is added when the stride skips it, so every layer is in some window."""
    starts = list(range(0, num_layers - size + 1, stride))
    if starts[-1] + size < num_layers:
        starts.append(num_layers - size)
    return [tuple(range(s, s + size)) for s in starts]


def window_spec(layers: tuple[int, ...], depth: int, mode: WindowMode, clean: Path | None = None,
                full_positions: int | None = None) -> InterventionSpec:
    """The spec that denies iterations 2..``depth`` the state stream in ``layers`` (module docstring); ``mean`` and
    ``resample`` read the ``clean`` run (recorded at ``depth``) at its ``full_positions`` first positions."""
    later = tuple(range(2, depth + 1))
    if mode == "freeze":
        item = Intervention(Site("layer_out", layers=layers, iterations=tuple(range(1, depth))), Operation("freeze"))
    elif mode == "zero":
        item = Intervention(Site("state_in", layers=layers, iterations=later), Operation("zero"))
    elif mode in READS_CLEAN:
        if clean is None or full_positions is None:
            raise UsageError(f"the {mode} window reads the clean run's states: pass clean and full_positions")
        site = Site("state_in", layers=layers, iterations=later, positions=tuple(range(full_positions)))
        item = Intervention(site, Operation(mode, run=str(clean), depth=depth, seed=0 if mode == "resample" else None))
    else:
        raise UsageError(f"unknown window mode {mode!r}; use one of {', '.join(WINDOW_MODES)}")
    return InterventionSpec((item,))


def condition_name(layers: tuple[int, ...], mode: str) -> str:
    """``window-<first>-<last>`` for ``freeze`` (the experiment's original condition names, so earlier folders
    resume), ``window-<first>-<last>-<mode>`` for the other modes."""
    name = f"window-{layers[0]}-{layers[-1]}"
    return name if mode == "freeze" else f"{name}-{mode}"


def run_window(setup: Setup, out: Path, config: WindowConfig) -> pd.DataFrame:
    """Record the clean run (depths 1 and k) and one run per window (depth k) under ``out``; write the table
    (``window.parquet``/``.csv``) and ``experiment-<kind>.json``. Returns the table (columns :data:`COLUMNS`)."""
    full = setup.base.full_positions
    k = config.depth
    axis = window_axis(setup, config)
    # every condition's spec is checked before the clean run is recorded (the controls' sites are the freeze's)
    if setup.family is not None:
        for layers in windows(len(axis), config.size, config.stride):
            families.check_spec_for(setup.sst, families.window_spec(setup.sst, tuple(axis[i] for i in layers), k,
                                                                    "freeze"))
    clean = record_condition(setup, out, "clean", [1, k])
    conditions = {"clean": files.condition_entry(out, clean, None)}
    rows = [_row(clean, clean, "clean depth 1", "clean", None, 1, k, config),
            _row(clean, clean, f"clean depth {k}", "clean", None, k, k, config)]
    for mode in config.modes:
        for window in windows(len(axis), config.size, config.stride):
            layers = tuple(axis[i] for i in window)
            name = condition_name(layers, mode)
            spec = _spec(setup, layers, k, mode, clean, full)
            folder = record_condition(setup, out, name, [k], spec)
            conditions[name] = files.condition_entry(out, folder, spec)
            rows.append(_row(clean, folder, name, mode, layers, k, k, config))
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    table = holm(table, ~table["condition"].str.startswith("clean"))
    table = planned_questions(table, ~table["condition"].str.startswith("clean"))
    tables = {TABLE: files.write_table(out, TABLE, table)}
    files.write_manifest(out, "window", config, setup.base, conditions, tables)
    return table


def window_axis(setup: Setup, config: WindowConfig) -> list[int]:
    """The layers windows slide over, ``config`` checked against them: every layer of an SST; a family's layers
    that carry a state (:func:`~sst_interp.experiments.families.carrying_layers`), the modes checked against the
    family (:func:`~sst_interp.experiments.families.check_window`). UsageError for what cannot run."""
    if setup.family is None:
        config.check(setup.num_layers, setup.base.full_positions, setup.update)
        return list(range(setup.num_layers))

    families.check_window(setup.sst, config.modes, config.depth, config.size)
    axis = families.carrying_layers(setup.sst)
    config.check(len(axis), setup.base.full_positions, None)
    return axis


def _spec(setup: Setup, layers: tuple[int, ...], depth: int, mode: str, clean: Path,
          full_positions: int) -> InterventionSpec:
    """The window's spec: the SST's (:func:`window_spec`) or the family's
    (:func:`~sst_interp.experiments.families.window_spec`)."""
    if setup.family is None:
        return window_spec(layers, depth, mode, clean, full_positions)  # type: ignore[arg-type]

    return family_window_spec(setup.sst, layers, depth, mode, clean, full_positions)


def _row(clean_path: Path, path: Path, name: str, mode: str, layers: tuple[int, ...] | None, depth: int, k: int,
         config: WindowConfig) -> dict[str, object]:
    """One table row: the run at ``path`` (its ``depth``) against the clean run at depth k."""

    clean, run = Run.open(clean_path), Run.open(path)
    reference = correctness_matrix(clean)[k]
    mine = correctness_matrix(run)[depth]
    questions = [q for q in reference.index if q in set(mine.index)]
    a = reference.loc[questions].to_numpy(bool)
    b = mine.loc[questions].to_numpy(bool)
    diff = b.astype(float) - a.astype(float)
    broken, fixed = int((a & ~b).sum()), int((~a & b).sum())
    accuracy_ci = change_interval(diff)
    bounds = first_token_logprob_bounds(clean, run, k, questions, intervened_depth=depth,
                                        position=config.logprob_position)
    return {
        "condition": name, "mode": mode, "first_layer": -1 if layers is None else layers[0],
        "last_layer": -1 if layers is None else layers[-1], "depth": depth, "n_questions": len(questions),
        "accuracy_pct": 100.0 * b.mean() if len(b) else float("nan"),
        "accuracy_change_pp": 100.0 * diff.mean() if len(diff) else float("nan"),
        "accuracy_change_ci_low": 100.0 * accuracy_ci.low, "accuracy_change_ci_high": 100.0 * accuracy_ci.high,
        **flip_and_logprob_columns(broken, fixed, len(questions), bounds),
    }
