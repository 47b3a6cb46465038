"""Every measurement checked against the hops organism's known task: one row per measurement family.

The task fixes what each iteration *could* know; it does not fix the algorithm the organism learned. Each row states
the prediction of the hypothesis the depth-by-hop table suggests (**sequential lookups, one per block**: HRM-Text's
H-cycle runs the L block, then the H block, so iteration ``i`` can have read ``2 i`` bindings and an ``h``-hop
question needs ``ceil(h / 2)`` iterations), measures with the suite's own API, and says whether the measurement
recovered the prediction. A row that does not is a result, reported as measured (docs/organism.md).

Rows (each a function returning a :class:`ValidationRow`):

- :func:`staged_capacity_row`: the depth-by-hop table itself (accuracy at sufficient and insufficient depths);
- :func:`lens_row`: the logit lens at the answer position, per iteration (:func:`~sst_interp.analyses.hops.lens_by_hop`);
- :func:`probe_row`: held-out linear decoding of each hop value per (iteration, layer)
  (:func:`~sst_interp.analyses.hops.hop_probe`);
- :func:`overlap_row`: top-k overlap between iterations 1 and 2 against "still computing after iteration 1" (AUC),
  and the paper's GMM low-overlap regime;
- :func:`depth_policy_row`: the per-position depth policies' halting iteration against the hop count;
- :func:`prompt_columns_row`: depth-1 accuracy by the chain's links that point backward in the prompt (lookups
  the prompt's own columns do, :mod:`~sst_interp.organism.prompt_columns`);
- :func:`patching_row`: counterfactual patching (:mod:`~sst_interp.experiments.hops_patching`);
- :func:`window_row`: the window experiment, each block's carried state frozen after iteration 1, by hop count
  (:mod:`~sst_interp.experiments.window`);
- :func:`attribution_row`: attribution patching's first-order estimates against real patching of the same sites
  (:mod:`~sst_interp.experiments.attribution`);
- the paper's Sec. 5 families (causal ordering, the two reorganisation regimes, later-iteration logit dynamics,
  convergent reasoning, the precision test) against the same hypothesis (:mod:`~sst_interp.experiments.sec5_validation`).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

from sst_interp.analyses.basins import fit_gmm
from sst_interp.analyses.depth_replay import halting_iterations, sweep_thresholds
from sst_interp.analyses.depth_trajectories import collect_trajectories
from sst_interp.analyses.hops_attention import attention_by_hop, hop_reads
from sst_interp.analyses.hops import answer_resolution, hop_probe, lens_by_hop, overlap_by_hops, question_truth
from sst_interp.checkpoints import resolve_model
from sst_interp.experiments import setup as experiment_setup
from sst_interp.experiments.attribution import VERIFIED, run_attribution
from sst_interp.experiments.configs import AttributionConfig, WindowConfig
from sst_interp.experiments.window import condition_name, run_window
from sst_interp.experiments.hops_patching import flip_table, patch_by_iteration
from sst_interp.experiments.sec5_validation import SEC5_ROWS, SEQUENTIAL, Measured, sec5_rows
from sst_interp.experiments.validation_row import ValidationRow, markdown
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.stats import mann_whitney, wilson_interval
from sst_interp.kernels.results import NotApplicable
from sst_interp.model.halting import parse_position_policy
from sst_interp.model.loop_model import LoopModel, load_loop_backbone
from sst_interp.model.loops import native_loop
from sst_interp.organism.prompt_columns import backward_links
from sst_interp.organism.looped import answer_predictions
from sst_interp.organism.task import HopsQuestion, HopsSpec, split_items
from sst_interp.organism.tables import tally_by_hop
from sst_interp.organism.train import ORGANISM_FILE
from sst_interp.record.options import RecordOptions
from sst_interp.store import Run

#: The held-out accuracy a probe must reach for a hop value to count as decodable at a (iteration, layer) slot.
DECODABLE = 0.9
#: The patched fraction that counts as "the answer became B's".
FLIPPED = 0.5
#: The rank agreement (Spearman) between attribution's estimates and real patching that counts as agreeing.
AGREES = 0.8
#: Lookups per iteration under the sequential hypothesis (HRM-Text: an L block and an H block per H-cycle).
LOOKUPS_PER_ITERATION = 2


def needed_iterations(hops: int) -> int:
    """The iterations an ``hops``-hop question needs under the sequential hypothesis."""
    return math.ceil(hops / LOOKUPS_PER_ITERATION)


def staged_capacity_row(table: dict[int, dict[int, tuple[int, int]]], chance: float) -> ValidationRow:
    """The depth-by-hop table (``table[depth][hops] = (correct, total)``): accuracy where ``depth >=
    needed_iterations(h)`` against where it is not, with chance ``chance``."""
    rows = [(depth, hops, total, correct / total, *_wilson(correct, total), depth >= needed_iterations(hops))
            for depth, row in table.items() for hops, (correct, total) in row.items()]
    frame = pd.DataFrame(rows, columns=["depth", "hops", "questions", "accuracy", "low", "high", "sufficient"])
    enough, short = frame[frame["sufficient"]], frame[~frame["sufficient"]]
    worst = float(enough["accuracy"].min())
    above_chance = float(short["accuracy"].max()) if len(short) else float("nan")
    return ValidationRow(
        "staged capacity: exact-match accuracy by depth and hop count (organism.looped.depth_by_hop)",
        f"accuracy >= 0.95 wherever depth >= ceil(h/2); near chance ({chance:.2f}) below",
        f"lowest accuracy at a sufficient depth {worst:.3f}; highest at an insufficient depth {above_chance:.3f}",
        bool(worst >= 0.95 and (len(short) == 0 or above_chance < 0.5)), frame)


def _wilson(correct: int, total: int) -> tuple[float, float]:
    interval = wilson_interval(correct, total)
    return interval.low, interval.high


def lens_row(run, depth: int) -> ValidationRow:
    """The lens at the answer position: from which iteration the answer stays on top, per hop count, and how often
    an intermediate hop value is on top before that."""
    lens = lens_by_hop(run, depth)
    correct = lens[(lens["iteration"] == depth) & lens["top_is_answer"]]["question_id"]
    lens = lens[lens["question_id"].isin(set(correct))]
    resolved = []
    for question_id, rows in lens.groupby("question_id"):
        rows = rows.sort_values("iteration")
        on_top = rows["top_is_answer"].to_numpy()
        # the first iteration from which the answer stays on top to the end
        first = depth - int(np.argmin(on_top[::-1])) + 1 if not on_top.all() else 1
        resolved.append((question_id, int(rows["hops"].iloc[0]), first, needed_iterations(int(rows["hops"].iloc[0]))))
    frame = pd.DataFrame(resolved, columns=["question_id", "hops", "resolved_at", "predicted"])
    by_hops = frame.assign(hit=frame["resolved_at"] == frame["predicted"]).groupby("hops").agg(
        questions=("question_id", "size"), resolved_at=("resolved_at", "mean"), predicted=("predicted", "first"),
        matches=("hit", "mean")).reset_index()
    early = lens[(lens["hops"] >= 3) & (lens["iteration"] < lens["hops"].map(needed_iterations))]
    intermediate = float(early["top_token"].str.isalpha().mean()) if len(early) else float("nan")
    agreement = float((frame["resolved_at"] == frame["predicted"]).mean())
    return ValidationRow(
        "logit lens at the answer position (analyses.hops.lens_by_hop)",
        "the answer is on top from iteration ceil(h/2) on, not before; a variable (an intermediate hop value) "
        "on top before that if the lens reads the pointer",
        f"answer first stays on top at the predicted iteration for {agreement:.3f} of {len(frame)} correct "
        f"questions; a variable on top before resolution in {intermediate:.3f} of {len(early)} (question, "
        "iteration) cells with h >= 3",
        bool(agreement >= 0.9), by_hops)


def probe_row(run, depth: int, folds: int = 5) -> ValidationRow:
    """Held-out decoding of each hop value: the first (iteration, layer) slot where it reaches :data:`DECODABLE`,
    against the sequential slot (iteration ``ceil(j/2)``, the L block for odd ``j`` and the H block for even)."""
    probe = hop_probe(run, depth, folds=folds)
    rows = []
    for hop, cells in probe.groupby("hop"):
        # slot order: (iteration, layer): the L block (layer 0) runs before the H block (layer 1) in an H-cycle
        cells = cells.sort_values(["iteration", "layer"])
        good = cells[cells["accuracy"] >= DECODABLE]
        first = (int(good["iteration"].iloc[0]), int(good["layer"].iloc[0])) if len(good) else None
        predicted = (needed_iterations(hop), (hop - 1) % LOOKUPS_PER_ITERATION)
        rows.append((hop, int(cells["questions"].iloc[0]), float(cells["majority"].max()),
                     float(cells["accuracy"].max()), first, predicted, first == predicted))
    frame = pd.DataFrame(rows, columns=["hop", "questions", "majority", "best_accuracy", "first_slot",
                                        "predicted_slot", "matches"])
    return ValidationRow(
        "linear probe: held-out decoding of hop value j per (iteration, layer) (analyses.hops.hop_probe)",
        f"hop j first decodable (>= {DECODABLE}) at iteration ceil(j/2), in the L block for odd j and the H block "
        "for even j",
        f"first slot matches for {int(frame['matches'].sum())} of {len(frame)} hops; "
        + "; ".join(f"j={r.hop}: {r.first_slot}" for r in frame.itertuples()),
        bool(frame["matches"].mean() >= 0.8), probe)


def overlap_row(run, depth: int) -> ValidationRow:
    """Top-k overlap of the answer column between iterations 1 and 2: lower where the question still needs
    iterations after the first (h > 2) (AUC), and whether the paper's 2-component GMM puts those in its low
    regime."""
    frame = overlap_by_hops(run, depth, 1, 2)
    computing = (frame["hops"] > LOOKUPS_PER_ITERATION).to_numpy()
    auc = float(roc_auc_score(computing, -frame["overlap"].to_numpy()))
    fit = fit_gmm(frame["overlap"].to_numpy())
    if isinstance(fit, NotApplicable):
        gmm_text, low = f"GMM not fitted: {fit.reason}", None
    else:
        low = (frame["overlap"] < fit.threshold).to_numpy()
        gmm_text = (f"GMM threshold {fit.threshold:.3f}: {low[computing].mean():.3f} of still-computing and "
                    f"{low[~computing].mean():.3f} of resolved questions in the low regime")
    frame = frame.assign(still_computing=computing, low_regime=low if low is not None else np.nan)
    return ValidationRow(
        "top-k overlap between iterations 1 and 2, and its GMM regime (analyses.overlap, analyses.basins.fit_gmm)",
        "lower overlap where the question is still being computed after iteration 1 (h > 2): AUC well above 0.5",
        f"AUC {auc:.3f} over {len(frame)} questions; {gmm_text}", bool(auc >= 0.8), frame)


def attention_row(run, depth: int) -> ValidationRow:
    """Which binding the heads read at the answer column (``record --attention``): per (iteration, block), the head
    that reads the sequential hypothesis' hop most often (iteration ``i``'s L block hop ``2i-1``, its H block hop
    ``2i``), over the questions that have that hop."""
    frame = attention_by_hop(run, depth)
    most = int(frame["hops"].max())
    predicted = {(i, block): hop for i in range(1, depth + 1) for block, hop in ((0, 2 * i - 1), (1, 2 * i))
                 if hop <= most}
    table = hop_reads(frame, predicted)
    return ValidationRow(
        "attention at the answer column: the binding each block's heads read most, per iteration "
        "(analyses.hops_attention, record --attention)",
        "iteration i's L block reads hop 2i-1's binding and its H block hop 2i's (some head's heaviest key is that "
        "binding for >= 0.8 of the questions that have the hop)",
        "; ".join(f"i={r.iteration} {'LH'[r.layer]}: hop {r.predicted_hop} read in {r.reads_predicted:.2f} "
                  f"(head {r.best_head}); the block reads hop {r.chain_head_reads} (head {r.chain_head}, "
                  f"{r.chain_head_share:.2f}; n {r.questions})" for r in table.itertuples()),
        bool((table["reads_predicted"] >= 0.8).all()), table)


def depth_policy_row(run) -> ValidationRow:
    """Each per-position rule (``kl``, ``entropy``, ``margin``, ``state``) at its median threshold: mean halting
    iteration per hop count, and its Spearman correlation with the hop count."""
    traj = collect_trajectories(run)
    hops = question_truth(run).loc[traj.index["question_id"], "hops"].to_numpy()
    rows = []
    for rule in traj.values:
        thresholds = sweep_thresholds(traj, rule, (0.5,))
        if not thresholds:
            continue
        policy = parse_position_policy(f"{rule}:{thresholds[0]!r},max={traj.depth}", traj.depth)
        halt = halting_iterations(traj, policy)
        known = halt > 0
        rho = spearmanr(halt[known], hops[known]).statistic if known.sum() > 2 else float("nan")
        for h in sorted(set(hops[known])):
            rows.append((rule, float(thresholds[0]), int(h), float(halt[known & (hops == h)].mean()), float(rho)))
    frame = pd.DataFrame(rows, columns=["rule", "threshold", "hops", "mean_iterations", "spearman_rho"])
    best = frame.groupby("rule")["spearman_rho"].first()
    return ValidationRow(
        "per-position depth policies at their median thresholds (analyses.depth_policies)",
        "halting iteration grows with the hop count (Spearman rho > 0.5 for some rule)",
        "; ".join(f"{rule}: rho {rho:.2f}" for rule, rho in best.items()),
        bool((best > 0.5).any()), frame)


def patching_row(flips: pd.DataFrame) -> ValidationRow:
    """The counterfactual patching table (:func:`~sst_interp.experiments.hops_patching.flip_table`): the first
    iteration where patching makes B's answer win, per changed hop, against ``ceil(j / 2)``; with the pairs of the
    thinnest cell, and the fraction before the predicted iteration from pairs whose ``j`` is the chain's last binding
    (leakage) apart from the rest."""
    rows = []
    for hop, cells in flips.groupby("changed_hop"):
        cells = cells.sort_values("iteration")
        flipped = cells[cells["became_b"] >= FLIPPED]
        first = int(flipped["iteration"].iloc[0]) if len(flipped) else None
        early = cells[cells["iteration"] < needed_iterations(hop)]
        rows.append((hop, int(cells["pairs"].min()), int(cells["last_pairs"].min()), first, needed_iterations(hop),
                     first == needed_iterations(hop), _pooled(early, "inner"), _pooled(early, "last")))
    frame = pd.DataFrame(rows, columns=["changed_hop", "pairs", "last_binding_pairs", "first_flip", "predicted",
                                        "matches", "early_inner", "early_last"])
    return ValidationRow(
        "counterfactual patching of the answer column (experiments.hops_patching)",
        "patching at iteration i from a prompt whose hop-j binding differs changes the answer to B's from "
        "i = ceil(j/2) on, not before",
        f"first flip at the predicted iteration for {int(frame['matches'].sum())} of {len(frame)} hops; "
        + "; ".join(f"j={r.changed_hop}: {r.first_flip} (n {r.pairs})" for r in frame.itertuples())
        + f"; before the predicted iteration B's answer wins in {_pooled_all(flips, 'inner'):.3f} of inner pairs and "
        f"{_pooled_all(flips, 'last'):.3f} of last-binding pairs (leakage)",
        bool(frame["matches"].mean() >= 0.8), flips)


def _pooled(cells: pd.DataFrame, part: str) -> float:
    """The ``part`` (inner or last) pairs' became-B fraction pooled over ``cells`` (NaN with no pairs)."""
    pairs = cells[f"{part}_pairs"].to_numpy()
    if pairs.sum() == 0:
        return math.nan
    return float((cells[f"{part}_became_b"].fillna(0).to_numpy() * pairs).sum() / pairs.sum())


def _pooled_all(flips: pd.DataFrame, part: str) -> float:
    """:func:`_pooled` over every cell before its hop's predicted iteration."""
    return _pooled(flips[flips["iteration"] < flips["changed_hop"].map(needed_iterations)], part)


def prompt_columns_row(questions: Sequence[HopsQuestion], predictions: Sequence[str], depth: int = 1) -> ValidationRow:
    """Accuracy at ``depth`` by hop count and the number of the chain's links that point backward in the prompt
    (:func:`~sst_interp.organism.prompt_columns.backward_links`), each cell with its 95% Wilson interval.

    Args:
        questions: the questions asked (their prompts and chains are the truth).
        predictions: the model's first answer token for each, at ``depth``
            (:func:`~sst_interp.organism.looped.answer_predictions`).
        depth: the depth they were answered at (1: one H-cycle, two lookups at the answer column).
    """
    frame = pd.DataFrame({"hops": [q.hops for q in questions],
                          "backward": [backward_links(q.prompt, q.chain) for q in questions],
                          "correct": [p == q.answer for q, p in zip(questions, predictions)]})
    rows = []
    for (hops, backward), cell in frame.groupby(["hops", "backward"]):
        interval = wilson_interval(int(cell["correct"].sum()), len(cell))
        rows.append((depth, hops, backward, len(cell), float(cell["correct"].mean()), interval.low, interval.high))
    table = pd.DataFrame(rows, columns=["depth", "hops", "backward_links", "questions", "accuracy", "low", "high"])
    # the first hop count the answer column cannot finish alone at this depth: its links are all it can shorten
    first_short = LOOKUPS_PER_ITERATION * depth + 1
    cells = table[table["hops"] == first_short].set_index("backward_links")
    fewest, most = cells.iloc[0], cells.iloc[-1]
    return ValidationRow(
        f"prompt-column lookups: accuracy at depth {depth} by the chain's backward links "
        "(organism.prompt_columns.backward_links)",
        "a link whose target is bound earlier in the prompt is resolved at its own column, so at an insufficient "
        "depth accuracy rises with the backward links (sequential lookups at the answer column alone predict chance)",
        f"h = {first_short} at depth {depth}: "
        + ", ".join(f"{r.accuracy:.2f} [{r.low:.2f}, {r.high:.2f}] (n {r.questions}) with {r.Index}"
                    for r in cells.itertuples()) + " backward links",
        bool(most["low"] > fewest["high"]), table)


def window_row(table: pd.DataFrame, by_hop: pd.DataFrame) -> ValidationRow:
    """The window experiment (one block per window, ``freeze``: the block's carried state held at iteration 1's
    from then on) against the sequential hypothesis: a block frozen after iteration 1 has done its iteration-1
    lookups only, so the questions that need more iterations (h > 2) should break and 1-2-hop questions survive.

    Args:
        table: the experiment's table (:func:`~sst_interp.experiments.window.run_window`).
        by_hop: accuracy per (condition, hops) (:func:`organism_window`).
    """
    freezes = table[table["mode"] == "freeze"]
    clean = by_hop[by_hop["condition"] == "clean"].set_index("hops")["accuracy"]
    parts, recovered = [], True
    for row in freezes.itertuples():
        mine = by_hop[by_hop["condition"] == row.condition].set_index("hops")["accuracy"]
        short, long = clean.loc[clean.index <= LOOKUPS_PER_ITERATION] - mine.loc[mine.index <= LOOKUPS_PER_ITERATION], \
            clean.loc[clean.index > LOOKUPS_PER_ITERATION] - mine.loc[mine.index > LOOKUPS_PER_ITERATION]
        parts.append(f"block {row.first_layer}: {row.accuracy_change_pp:+.0f} pp (McNemar p {row.mcnemar_exact_p:.1g}); "
                     f"loss on h <= 2 {short.mean():.2f}, on h > 2 {long.mean():.2f}")
        recovered &= bool(long.mean() > short.mean())
    return ValidationRow(
        "window experiment: each block's carried state frozen after iteration 1 (experiments.window)",
        "freezing a block after iteration 1 breaks the questions that need more iterations (h > 2) more than the "
        "1-2-hop questions iteration 1 resolves",
        "; ".join(parts), recovered, by_hop)


def attribution_row(verified: pd.DataFrame) -> ValidationRow:
    """Attribution patching's verified cells (``attribution_verified``: per (layer, position, source iteration) the
    mean first-order estimate beside the mean real patching effect): do the estimates rank the sites as real
    patching does, and pick its strongest site first?"""
    cells = verified.assign(ratio=verified["estimate_mean"] / verified["real_mean"].where(verified["real_mean"] != 0))
    rho = float(spearmanr(cells["estimate_mean"], cells["real_mean"]).statistic) if len(cells) > 2 else math.nan
    site = ["layer", "position", "source_iteration"]
    top_estimate = tuple(cells.loc[cells["estimate_mean"].abs().idxmax(), site])
    top_real = tuple(cells.loc[cells["real_mean"].abs().idxmax(), site])
    first = cells[cells["source_iteration"] == 1]
    first_zero = bool((first["estimate_mean"] == 0).all() and (first["real_mean"] == 0).all())
    ratios = cells["ratio"].dropna()
    return ValidationRow(
        "attribution patching: first-order estimates against real patching of the same sites "
        "(experiments.attribution)",
        f"the estimates rank the sites as real patching does (Spearman rho >= {AGREES}) and name its strongest site "
        "first; iteration 1 (depth 1's own pass) moves nothing in either",
        f"rho {rho:.2f} over {len(cells)} cells; strongest site (layer, position, iteration) by estimate "
        f"{top_estimate}, by real patching {top_real}; iteration 1 zero in both: {first_zero}; estimate / real "
        f"{ratios.min():.2f} to {ratios.max():.2f}: the ranks agree, the magnitudes of a first-order estimate of a "
        "whole-state patch do not",
        bool(rho >= AGREES and top_estimate == top_real and first_zero), cells)


def staircase_markdown(flips: pd.DataFrame) -> str:
    """The patching staircase as Markdown: per changed hop j (rows) and iteration i (columns), the fraction of pairs
    whose answer became B's, its 95% Wilson interval and the pairs n; then the last-binding (leakage) pairs apart."""
    iterations = sorted(flips["iteration"].unique())
    head = "| hop j | " + " | ".join(f"i = {i}" for i in iterations) + " |"
    lines = [head, "|---|" + "---|" * len(iterations)]
    for hop, cells in flips.groupby("changed_hop"):
        cells = cells.set_index("iteration")
        lines.append(f"| {hop} | " + " | ".join(
            f"{cells.at[i, 'became_b']:.2f} [{cells.at[i, 'became_b_low']:.2f}, {cells.at[i, 'became_b_high']:.2f}] "
            f"(n {cells.at[i, 'pairs']}; last binding {_fraction(cells.at[i, 'last_became_b'])} of "
            f"{cells.at[i, 'last_pairs']})" for i in iterations) + " |")
    return "\n".join(lines)


def _fraction(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}"


ROW_FILES = ("staged_capacity", "lens", "probe", "overlap", "depth_policies", "prompt_columns", "attention",
             "patching", "window", "attribution", *SEC5_ROWS)
#: the lens' answer-on-top fraction per hop count and iteration (the figure's left panel)
RESOLUTION_FILE = "answer_resolution.csv"


def _organism_setup(folder: Path, depths: list[int], questions: int):
    """The experiments' Setup for the organism on the first ``questions`` test questions (answer position only)."""
    return experiment_setup.load(RecordOptions(model=str(folder), questions="hops", limit=questions, depths=depths,
                                               device="cpu", full_positions=1, sketch_positions=0))


def organism_window(folder: Path, depth: int, questions: int, out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``python -m sst_interp.intervene window --model FOLDER --questions hops --limit N --depth D --size 1
    --stride 1`` through the experiment's API; returns its table and the accuracy per (condition, hops) of the clean
    depth-D run and each freeze (the experiment's folder is kept under ``out``)."""
    table = run_window(_organism_setup(folder, [1, depth], questions), out,
                       WindowConfig(depth=depth, size=1, stride=1))
    frames = []
    names = ["clean", *(condition_name((int(r.first_layer),), "freeze")
                        for r in table[table["mode"] == "freeze"].itertuples())]
    for name in names:
        run = Run.open(experiment_setup.condition_path(out, name))
        answers = run.generations()
        answers = answers[(answers["depth"] == depth) & (answers["turn"] == 0)].set_index("question_id")
        truth = question_truth(run)
        frame = truth.join(answers["correct"]).groupby("hops")["correct"].mean().rename("accuracy").reset_index()
        frames.append(frame.assign(condition=name))
    return table, pd.concat(frames, ignore_index=True)[["condition", "hops", "accuracy"]]


def organism_attribution(folder: Path, depth: int, questions: int, out: Path) -> pd.DataFrame:
    """``python -m sst_interp.intervene attribute --model FOLDER --questions hops --limit N --depth D`` through the
    experiment's API, every cell verified (2 blocks x the answer position x D source iterations); returns its
    ``attribution_verified`` table. The experiment's folder (clean run, tables, manifest) is kept under ``out``."""
    setup = _organism_setup(folder, [1, depth], questions)
    cells = setup.num_layers * depth
    return run_attribution(setup, out, AttributionConfig(depth=depth, positions=1, verify_top=cells))[VERIFIED]


def validate(config, open_analysis: Callable[[Path], Measured]) -> dict[str, ValidationRow]:
    """Every row on ``config.run`` (recorded from ``config.model``); writes ``validation.md`` and one CSV per row
    (named as in :data:`ROW_FILES`) into ``config.out`` and returns the rows by name, in that order. The attention row
    is there only when the run recorded attention (``record --attention all``).

    Args:
        config: a :class:`~sst_interp.organism.config.ValidateConfig`.
        open_analysis: ``study.open`` (a floor above this module, so passed in): the Sec. 5 rows read their
            measurements from ``open_analysis(config.run)``.
    """
    config.check()
    folder = Path(resolve_model(config.model))
    if not (folder / ORGANISM_FILE).is_file():
        raise UsageError(f"--model {config.model} is not an organism folder (no {ORGANISM_FILE}); pass the folder "
                         "`python -m sst_interp.organism train` wrote, or hops-organism")
    organism = json.loads((folder / ORGANISM_FILE).read_text())
    spec = HopsSpec(**organism["task"])
    run = Run.open(config.run)
    depth = max(run.depths)
    if config.features is not None:
        # SAELens, the optional features extra, loads only when asked (the demo's environment has none); the
        # dictionaries are checked here, before minutes of rows run, not when their rows come
        from sst_interp.experiments.feature_validation import check_feature_folders, organism_feature_rows

        check_feature_folders(config.features, depth)
    loop = native_loop("hrm_text")
    backbone, tokenizer = load_loop_backbone(str(folder), loop)
    # the depth-by-hop table and the prompt-column row on many fresh test questions (the run's are too few per cell)
    fresh = split_items(spec, "test", config.table_questions)
    predicted = {d: answer_predictions(backbone, tokenizer, fresh, d) for d in range(1, depth + 1)}
    rows = {"staged_capacity": staged_capacity_row({d: tally_by_hop(fresh, p) for d, p in predicted.items()},
                                                   1 / spec.chains),
            "lens": lens_row(run, depth), "probe": probe_row(run, depth, config.folds),
            "overlap": overlap_row(run, depth), "depth_policies": depth_policy_row(run),
            "prompt_columns": prompt_columns_row(fresh, predicted[1])}
    if "attention" in run.manifest:
        rows["attention"] = attention_row(run, depth)
    else:
        print("note: the run holds no attention, so validation.md has no attention row; record with --attention all",
              file=sys.stderr)
    questions = split_items(spec, "test", config.patch_questions)
    rows["patching"] = patching_row(flip_table(patch_by_iteration(LoopModel(backbone, loop), tokenizer, questions,
                                                                  depth, config.seed, max_pairs=config.patch_pairs)))
    config.out.mkdir(parents=True, exist_ok=True)
    rows["window"] = window_row(*organism_window(folder, depth, config.attribution_questions, config.out / "window"))
    rows["attribution"] = attribution_row(organism_attribution(folder, depth, config.attribution_questions,
                                                               config.out / "attribution"))
    rows.update(zip(SEC5_ROWS, sec5_rows(open_analysis(config.run), SEQUENTIAL)))
    if config.features is not None:
        rows.update(organism_feature_rows(config.features, str(folder), spec, depth, config.feature_questions,
                                          config.folds, config.patch_pairs))
    answer_resolution(run, depth).to_csv(config.out / RESOLUTION_FILE, index=False)
    for name, row in rows.items():
        row.detail.to_csv(config.out / f"{name}.csv", index=False)
    (config.out / "validation.md").write_text(
        markdown(list(rows.values())) + "\n\n## The patching staircase, n per cell\n\n"
        + staircase_markdown(rows["patching"].detail) + "\n")
    return rows
