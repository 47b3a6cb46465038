"""The paper's adaptive halting probe (Sec. 6) checked against an overthinking organism's known truth.

``hops-overthink`` (docs/organism.md) is trained only at each question's sufficient depth ``ceil(k/2)`` on counted
hops whose chain runs 0-2 bindings past the count, so the task says, per question, whether one more H-cycle breaks
the answer: it does where the chain runs on (``beyond > 0``: the pointer advances past the answer), it need not where
the chain ends at the answer. The paper's method end to end, each step scored against that truth:

- :func:`halting_row`: the 10-neuron probe (trained on the paper's MUST HALT labels at each layer of the sweep)
  halts each question; against the truth's depth ``ceil(k/2)``, and the probe-guided accuracy against flat and
  staged depth;
- :func:`loocv_row`: the calibrated leave-one-MUST-HALT-question-out cross-validation (binomial and, when asked, the
  sequential label-permutation test);
- :func:`essential_row`: the input-dimension ablation's essential set, and whether those dimensions carry the
  mechanism: a held-out linear read-out of "this depth has done the count" (``2 d >= k``) and "the chain runs on"
  (``beyond > 0``) from them, beside the same number of random dimensions.

:func:`validate_overthink` adds the paper's Sec. 5 families against the same truth
(:data:`~sst_interp.experiments.sec5_validation.OVERSHOOT`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sst_interp.experiments.sec5_validation import OVERSHOOT, SEC5_ROWS, Measured, sec5_rows
from sst_interp.experiments.validation_row import ValidationRow, markdown
from sst_interp.kernels.errors import UsageError
from sst_interp.probe.dataset import ProbeData, load_probe_data_layers
from sst_interp.probe.evaluate import evaluate_probe
from sst_interp.probe.features import greedy_prune, topk_sweep
from sst_interp.probe.loocv import loocv
from sst_interp.probe.model import ProbeConfig
from sst_interp.probe.train import train_probe
from sst_interp.store import Run

#: The paper's probe width (Sec. 6: the 10-neuron probe).
HIDDEN = 10
#: Folds of the held-out read-outs of the essential dimensions.
READOUT_FOLDS = 5


@dataclass(frozen=True)
class Truth:
    """Per question of a counted-hops run: ``hops`` (k), ``beyond`` (bindings past the answer) and the depth the task
    says to halt at, ``ceil(k / 2)``."""

    frame: pd.DataFrame

    @classmethod
    def of(cls, run: Run) -> Truth:
        questions = run.questions()
        meta = questions["metadata"].map(json.loads)
        if not meta.map(lambda m: "beyond" in m).all():
            raise UsageError(f"{run.path} holds no counted-hops questions (no 'beyond' in the metadata); record an "
                             "overthinking organism: record --model hops-overthink --questions hops --depths 1,2,3,4,5")
        hops = meta.map(lambda m: int(m["hops"]))
        return cls(pd.DataFrame({"hops": hops.to_numpy(), "beyond": meta.map(lambda m: int(m["beyond"])).to_numpy(),
                                 "halt_at": hops.map(lambda k: math.ceil(k / 2)).to_numpy()},
                                index=questions["question_id"].astype(str)))


def _probe(data: ProbeData):
    config = ProbeConfig(data.hidden_size, hidden=HIDDEN)
    return train_probe(data.x, data.y, config)[0]


def halting_row(run: Run, layers: list[int]) -> ValidationRow:
    """At each layer: a 10-neuron probe trained on every labelled timestep halts each question (the paper's
    simulation); the fraction halted at the truth's depth, among the questions whose chain runs on (the truth says
    one more H-cycle breaks them), and the probe-guided accuracy beside flat depth and staged depth (the oracle)."""
    truth = Truth.of(run).frame
    rows = []
    for layer, data in load_probe_data_layers(run, layers).items():
        outcome = evaluate_probe(_probe(data), data, ).outcome
        chosen = pd.Series(outcome.chosen_depth, index=list(outcome.question_ids))
        runs_on = truth.loc[chosen.index, "beyond"] > 0
        at_truth = chosen == truth.loc[chosen.index, "halt_at"]
        flat = data.correct.mean(axis=0)
        rows.append((layer, len(chosen), float(at_truth[runs_on].mean()), float(at_truth.mean()), outcome.accuracy,
                     float(flat.max()), int(flat.argmax()) + 1, float(data.correct.any(axis=1).mean())))
    table = pd.DataFrame(rows, columns=["layer", "questions", "halts_at_truth_runs_on", "halts_at_truth_all",
                                        "probe_accuracy", "best_flat_accuracy", "best_flat_depth",
                                        "staged_accuracy"])
    best = table.loc[table["probe_accuracy"].idxmax()]
    return ValidationRow(
        "halting probe: where the 10-neuron probe halts, against the depth the task says (probe.evaluate, paper "
        "Sec. 6)",
        "it halts at ceil(k/2) where the chain runs on (one more H-cycle overshoots), and probe-guided accuracy "
        "beats every flat depth",
        "; ".join(f"layer {r.layer}: halts at ceil(k/2) for {r.halts_at_truth_runs_on:.2f} of questions whose chain "
                  f"runs on ({r.halts_at_truth_all:.2f} of all {r.questions}); accuracy {r.probe_accuracy:.3f}"
                  for r in table.itertuples())
        + f"; best flat depth {int(best['best_flat_depth'])}: {best['best_flat_accuracy']:.3f}; staged (oracle) "
          f"{best['staged_accuracy']:.3f} (in-sample probes: the LOOCV row holds them out)",
        bool(best["halts_at_truth_runs_on"] >= 0.8 and best["probe_accuracy"] > best["best_flat_accuracy"]), table)


def loocv_row(run: Run, layer: int, permutations: int = 0, seed: int = 0) -> ValidationRow:
    """The calibrated LOOCV at ``layer`` (:func:`~sst_interp.probe.loocv.loocv`): held-out MUST HALT questions
    halted right, the binomial p against the base prediction rate and, with ``permutations``, the sequential
    label-permutation p."""
    data = load_probe_data_layers(run, [layer])[layer]
    result = loocv(data, ProbeConfig(data.hidden_size, hidden=HIDDEN), permutations=permutations,
                   permutation_seed=seed)
    table = result.table()
    row = table.iloc[0]
    calibrated = row["p_permutation"] if permutations else row["p_binomial"]
    return ValidationRow(
        f"calibrated LOOCV of the halting probe at layer {layer} (probe.loocv, paper app:halting_loocv)",
        "held-out MUST HALT questions are halted right far above the base rate (p <= 0.05)",
        f"{int(row['loocv_correct'])} of {int(row['folds'])} held out right ({row['accuracy']:.3f}; base rate "
        f"{row['base_rate']:.3f}); binomial p {row['p_binomial']:.1g}"
        + (f"; permutation p {row['p_permutation']:.3g} ({int(row['permutations'])} drawn: {row['permutation_stop']})"
           if permutations else "; no permutations drawn (--permutations 0)"),
        bool(calibrated <= 0.05), table)


def essential_row(run: Run, layer: int, seed: int = 0) -> ValidationRow:
    """The essential dimensions of the probe at ``layer`` (top-k sweep, then greedy pruning, as ``probe ablate``),
    and what they carry: held-out accuracy of a logistic read-out, from the position-0 states at every depth, of
    ``2 d >= k`` (the count is done) and of ``beyond > 0`` (the chain runs on), from the essential dimensions and
    from as many random ones."""
    data = load_probe_data_layers(run, [layer])[layer]
    probe = _probe(data)
    sweep = topk_sweep(probe, data)
    if sweep.minimal_k is None:
        return ValidationRow(f"essential dimensions of the halting probe at layer {layer} (probe.features)",
                             "a small essential set that carries the count and the chain's continuation",
                             "no top-k set reproduces the probe's outcome: no essential set", False, sweep.table())
    essential = greedy_prune(probe, data, sweep.minimal_k).essential
    truth = Truth.of(run).frame.loc[data.question_ids]
    depths = np.arange(1, data.eval_x.shape[1] + 1)
    states = data.eval_x.reshape(-1, data.hidden_size)  # [Q * i_max, d], question-major
    done = (2 * depths[None, :] >= truth["hops"].to_numpy()[:, None]).reshape(-1)
    runs_on = np.repeat(truth["beyond"].to_numpy() > 0, len(depths))
    rng = np.random.default_rng(seed)
    random_dims = np.sort(rng.choice(data.hidden_size, size=len(essential), replace=False))
    rest = np.setdiff1d(np.arange(data.hidden_size), essential)
    rows = []
    sets = [("essential", essential), ("random", random_dims), ("all", np.arange(data.hidden_size))]
    sets += [("rest", rest)] if len(rest) else []
    for name, target in (("count_done", done), ("chain_runs_on", runs_on)):
        for dims_name, dims in sets:
            rows.append((name, dims_name, len(dims), _readout(states[:, dims], target, seed),
                         float(max(target.mean(), 1 - target.mean()))))
    table = pd.DataFrame(rows, columns=["target", "dimensions", "n_dimensions", "heldout_accuracy", "majority"])
    cell = table.set_index(["target", "dimensions"])["heldout_accuracy"]
    return ValidationRow(
        f"essential dimensions of the halting probe at layer {layer} and the mechanism they carry (probe.features, "
        "paper Sec. 6.4)",
        "the essential set carries what decides overthinking: whether this depth has done the count (2d >= k) and "
        "whether the chain runs on, better than as many random dimensions",
        f"{len(essential)} essential of {data.hidden_size} dimensions (top-k {sweep.minimal_k}); held-out read-out of "
        f"'count done' {cell['count_done', 'essential']:.3f} (random {cell['count_done', 'random']:.3f}, all "
        f"{cell['count_done', 'all']:.3f}); of 'chain runs on' {cell['chain_runs_on', 'essential']:.3f} (random "
        f"{cell['chain_runs_on', 'random']:.3f}, all {cell['chain_runs_on', 'all']:.3f})",
        bool(cell["count_done", "essential"] > cell["count_done", "random"]
             and cell["chain_runs_on", "essential"] > cell["chain_runs_on", "random"]), table)


def _readout(x: np.ndarray, y: np.ndarray, seed: int) -> float:
    """Held-out accuracy (stratified k-fold) of a standardised logistic regression reading ``y`` from ``x``."""
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    folds = StratifiedKFold(READOUT_FOLDS, shuffle=True, random_state=seed)
    return float(cross_val_score(model, x, y, cv=folds).mean())


#: The rows' names (their CSV files), in order: the halting probe's, then the Sec. 5 families'.
OVERTHINK_ROWS = ("halting", "loocv", "essential", *SEC5_ROWS)


def validate_overthink(config, open_analysis: Callable[[Path], Measured]) -> dict[str, ValidationRow]:
    """Every row on ``config.run`` (an overthinking organism's run): the halting probe's three and the paper's Sec. 5
    families against the overshoot mechanism; writes ``overthink.md`` and one CSV per row into ``config.out``.

    Args:
        config: a :class:`~sst_interp.organism.config.OverthinkConfig`.
        open_analysis: ``study.open`` (a floor above this module, so passed in), for the Sec. 5 rows.
    """
    config.check()
    run = Run.open(config.run)
    Truth.of(run)  # a run of another task is refused before any probe trains
    recorded = list(range(int(run.manifest["num_layers"])))
    layers = list(config.layers) or recorded
    for layer in [*layers, config.loocv_layer]:
        if layer != -1 and layer not in recorded:
            raise UsageError(f"layer {layer} is outside the run's layers 0..{recorded[-1]}; pick one of them")
    layer = recorded[-1] if config.loocv_layer == -1 else config.loocv_layer
    rows = {"halting": halting_row(run, layers),
            "loocv": loocv_row(run, layer, config.permutations, config.seed),
            "essential": essential_row(run, layer, config.seed)}
    rows.update(zip(SEC5_ROWS, sec5_rows(open_analysis(config.run), OVERSHOOT)))
    config.out.mkdir(parents=True, exist_ok=True)
    for name, row in rows.items():
        row.detail.to_csv(config.out / f"{name}.csv", index=False)
    (config.out / "overthink.md").write_text(markdown(list(rows.values()), PREDICTION_HEADING) + "\n")
    return rows


#: The prediction column's heading in ``overthink.md``.
PREDICTION_HEADING = "prediction (the task's truth: overshoot where the chain runs on)"
