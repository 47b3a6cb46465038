"""Per-position depth measurements on planted trajectories: where each rule stops, which questions a replay
reproduces exactly, the L2 convergence point, regimes, agreement and the Pareto front (issue 23, item 4)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sst_interp.analyses import depth_agreement, depth_pareto, depth_positions, depth_replay, depth_trajectories
from sst_interp.kernels.errors import UsageError
from sst_interp.model.halting import parse_position_policy

NAN = math.nan
DEPTH = 4


def _traj(entropy, state=None, l2=None, tokens=None, argmax=None, index=None) -> depth_trajectories.Trajectories:
    """Trajectories with planted per-iteration values ([N, 4] each)."""
    entropy = np.asarray(entropy, dtype=float)
    n = len(entropy)
    if index is None:
        index = pd.DataFrame({"question_id": [f"q{i}" for i in range(n)], "turn": 0, "position": 0, "n_tokens": 1,
                              "token": 7 if tokens is None else tokens, "cut_by_budget": False})
    state = np.full((n, DEPTH), NAN) if state is None else np.asarray(state, dtype=float)
    l2 = np.full((n, DEPTH), NAN) if l2 is None else np.asarray(l2, dtype=float)
    argmax = np.full((n, DEPTH), 7, dtype=np.int64) if argmax is None else np.asarray(argmax, dtype=np.int64)
    values = {"entropy": entropy, "state": state, "kl": state.copy()}
    return depth_trajectories.Trajectories(DEPTH, index, values, argmax, l2, 3)


def _policy(text: str):
    return parse_position_policy(text, DEPTH)


def test_each_rule_stops_at_the_first_iteration_it_fires_within_min_and_max():
    traj = _traj(entropy=[[3.0, 2.0, 1.0, 0.5], [0.1, 0.1, 0.1, 0.1], [9.0, 9.0, 9.0, 9.0]],
                 state=[[NAN, 0.5, 0.01, 0.001], [NAN, 0.001, 0.5, 0.5], [NAN, 0.3, 0.2, 0.1]])
    assert depth_replay.halting_iterations(traj, _policy("entropy:1.5")).tolist() == [3, 1, 4]
    # strict: 1.0 is not < 1.0
    assert depth_replay.halting_iterations(traj, _policy("entropy:1.0")).tolist() == [4, 1, 4]
    assert depth_replay.halting_iterations(traj, _policy("entropy:1.5,min=2")).tolist() == [3, 2, 4]
    assert depth_replay.halting_iterations(traj, _policy("entropy:1.5,max=2")).tolist() == [2, 1, 2]
    assert depth_replay.halting_iterations(traj, _policy("state:0.05")).tolist() == [3, 2, 4]
    # any rule fires
    assert depth_replay.halting_iterations(traj, _policy("state:0.05,entropy:1.5")).tolist() == [3, 1, 4]
    # kl:0 never fires (fixed depth max); kl:inf fires as soon as it can (iteration 2: it compares two)
    assert depth_replay.halting_iterations(traj, _policy("kl:0")).tolist() == [4, 4, 4]
    assert depth_replay.halting_iterations(traj, _policy("kl:inf")).tolist() == [2, 2, 2]
    for text in ("entropy:0.2", "state:0.4,min=3", "kl:inf,max=3", "entropy:inf,min=4"):
        got = depth_replay.halting_iterations(traj, _policy(text))
        assert (got >= _policy(text).min_depth).all() and (got <= _policy(text).max_depth).all(), text


def test_a_position_without_the_rules_values_is_unknown_not_guessed():
    traj = _traj(entropy=[[3.0, 2.0, 1.0, 0.5], [3.0, 2.0, 1.0, 0.5]],
                 state=[[NAN, 0.5, 0.01, 0.001], [NAN, NAN, NAN, NAN]])
    assert depth_replay.halting_iterations(traj, _policy("state:0.05")).tolist() == [3, -1]
    assert depth_replay.halting_iterations(traj, _policy("entropy:1.5")).tolist() == [3, 3]
    with pytest.raises(UsageError, match="exceeds the run's depth"):
        depth_replay.halting_iterations(traj, parse_position_policy("entropy:1,max=5", 5))


def _episode_traj(halts_entropy, tokens_at_exit=None, budget=False):
    """One question, two turns of two positions; entropy planted so that ``entropy:1.5`` stops where asked."""
    rows, entropy, argmax = [], [], []
    for k, (turn, position) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        rows.append({"question_id": "q", "turn": turn, "position": position, "n_tokens": 2, "token": 7,
                     "cut_by_budget": budget})
        stop = halts_entropy[k]
        entropy.append([0.1 if i + 1 >= stop else 9.0 for i in range(DEPTH)])
        am = [7] * DEPTH
        if tokens_at_exit is not None and stop < DEPTH:
            am[stop - 1] = tokens_at_exit
        argmax.append(am)
    return _traj(entropy, argmax=argmax, index=pd.DataFrame(rows))


@pytest.mark.parametrize("halts, token, budget, exact", [
    ([4, 4, 4, 4], None, False, True),    # never exits early: the full-depth run
    ([4, 4, 4, 2], 7, False, True),       # exits at the very last token with the full-depth token
    ([4, 4, 4, 2], 9, False, False),      # ... with another token: the live turn may go on
    ([4, 4, 4, 2], 9, True, True),        # ... but the turn stopped at its budget anyway
    ([4, 2, 4, 4], 7, False, False),      # last token of the first turn: the next turn reads its KV entry
    ([2, 4, 4, 4], 7, False, False),      # an early exit mid-turn: every later position differs
])
def test_exact_questions_follow_the_simulations_rule(halts, token, budget, exact):
    traj = _episode_traj(halts, token, budget)
    halt = depth_replay.halting_iterations(traj, _policy("entropy:1.5"))
    assert halt.tolist() == halts
    assert bool(depth_replay.exact_questions(traj, halt)["q"]) is exact


def test_convergence_point_is_the_first_l2_change_below_the_threshold():
    traj = _traj(entropy=[[1, 1, 1, 1]] * 3,
                 l2=[[NAN, 5.0, 0.5, 0.1], [NAN, 0.2, 3.0, 3.0], [NAN, 4.0, 4.0, 4.0]])
    got, threshold = depth_replay.convergence_iterations(traj, threshold=1.0)
    assert got.tolist() == [3, 2, 4] and threshold == 1.0
    got, threshold = depth_replay.convergence_iterations(traj)  # default: the median change
    assert threshold == float(np.median([5.0, 0.5, 0.1, 0.2, 3.0, 3.0, 4.0, 4.0, 4.0])) == 3.0
    assert got.tolist() == [3, 2, 4]


def test_histogram_splits_by_regime_and_agreement_counts_against_convergence():
    traj = _traj(entropy=[[0.1] * 4, [9.0, 0.1, 0.1, 0.1], [9.0] * 4, [9.0] * 4],
                 state=[[NAN, 0.5, 0.5, 0.5]] * 4, l2=[[NAN, 0.1, 0.1, 0.1], [NAN, 0.1, 0.1, 0.1],
                                                      [NAN, 9.0, 9.0, 9.0], [NAN, 9.0, 0.1, 0.1]])
    labels = pd.DataFrame({"depth": DEPTH, "question_id": ["q0", "q1", "q2"], "turn": 0, "position": 0,
                           "iter_a": 1, "iter_b": DEPTH, "low_overlap": [True, False, False]})
    pp = depth_positions.policy_positions(traj, [_policy("entropy:1.0")], labels)
    assert pp.positions["regime"].tolist() == ["low_overlap", "stable", "stable", "unlabelled"]
    assert pp.positions["iterations"].tolist() == [1, 2, 4, 4]
    converged, _ = depth_replay.convergence_iterations(traj, threshold=1.0)
    assert converged.tolist() == [2, 2, 4, 3]
    hist = depth_positions.iteration_histogram(pp).set_index(["regime", "iterations"])
    assert hist.loc[("low_overlap", 1), "positions"] == 1 and hist.loc[("low_overlap", 1), "fraction"] == 1.0
    assert hist.loc[("stable", 2), "fraction"] == 0.5 and hist.loc[("stable", 4), "fraction"] == 0.5
    agree = depth_agreement.convergence_agreement(pp).iloc[0]
    # The default threshold is the median change (0.1 here), so convergence is where the change drops below 0.1:
    # never for any of them (strict), so every convergence point is max.
    assert pp.l2_threshold == 0.1 and agree["positions"] == 4
    assert agree["agree"] == 0.5 and agree["earlier"] == 0.5 and agree["later"] == 0.0
    assert agree["mean_difference"] == pytest.approx((1 + 2 + 4 + 4) / 4 - 4)


def test_sweep_thresholds_never_sit_on_a_recorded_value():
    values = [[NAN, 0.1, 0.2, 0.9], [NAN, 0.3, 0.4, 0.9], [NAN, 0.5, 0.6, 0.9]]
    traj = _traj(entropy=[[1, 1, 1, 1]] * 3, state=values)
    taus = depth_replay.sweep_thresholds(traj, "state", (0.1, 0.5, 0.9))
    recorded = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6}  # iteration 4 (max) is no choice and is left out
    assert taus and not recorded & set(taus)
    assert taus == sorted(taus) and all(0.1 < t < 0.65 for t in taus)
    with pytest.raises(UsageError, match="strictly between 0 and 1"):
        depth_replay.sweep_thresholds(traj, "state", (0.0,))


def test_pareto_front_holds_only_measured_rows_no_other_beats():
    rows = pd.DataFrame([
        depth_pareto.row_of(condition="fixed 1", source="live", accuracy_pct=5.0, mean_iterations=1.0),
        depth_pareto.row_of(condition="fixed 4", source="live", accuracy_pct=5.0, mean_iterations=4.0),
        depth_pareto.row_of(condition="state", source="live", accuracy_pct=6.0, mean_iterations=2.5),
        depth_pareto.row_of(condition="staged", source="oracle", accuracy_pct=6.0, mean_iterations=3.0),
        depth_pareto.row_of(condition="sim", source="simulated", accuracy_low_pct=0.0, accuracy_high_pct=100.0,
                mean_iterations=1.5),
    ], columns=list(depth_pareto.PARETO_COLUMNS))
    front = depth_pareto.mark_pareto(rows).set_index("condition")["pareto"]
    assert front.to_dict() == {"fixed 1": True, "fixed 4": False, "state": True, "staged": False, "sim": False}


def test_the_hindsight_oracle_is_never_on_the_front_even_where_it_beats_every_live_row():
    rows = pd.DataFrame([
        depth_pareto.row_of(run="r", condition="fixed 1", source="live", accuracy_pct=5.0, mean_iterations=1.0),
        depth_pareto.row_of(run="r", condition="state", source="live", accuracy_pct=6.0, mean_iterations=2.5),
        depth_pareto.row_of(run="r", condition="staged (oracle)", source="oracle", accuracy_pct=9.0,
                            mean_iterations=1.2),
    ], columns=list(depth_pareto.PARETO_COLUMNS))
    front = depth_pareto.mark_pareto(rows).set_index("condition")["pareto"]
    assert front.to_dict() == {"fixed 1": True, "state": True, "staged (oracle)": False}


def test_combined_runs_get_distinct_labels_and_a_warning_when_question_sets_differ():
    fixed = depth_pareto.ParetoResult(pd.DataFrame([
        depth_pareto.row_of(run="fixed-run", condition="fixed 1", source="live", n_questions=24, accuracy_pct=5.0,
                  mean_iterations=1.0)], columns=list(depth_pareto.PARETO_COLUMNS)))
    again = depth_pareto.ParetoResult(pd.DataFrame([
        depth_pareto.row_of(run="other-run", condition="fixed 1", source="live", n_questions=24, accuracy_pct=4.0,
                  mean_iterations=1.0)], columns=list(depth_pareto.PARETO_COLUMNS)))
    live = depth_pareto.ParetoResult(pd.DataFrame([
        depth_pareto.row_of(run="kl-run", condition="kl<=0.1", source="live", n_questions=8, accuracy_pct=7.0,
                  mean_iterations=1.5)], columns=list(depth_pareto.PARETO_COLUMNS)))
    same = depth_pareto.combine([fixed, again])
    assert list(same.rows["condition"]) == ["fixed-run: fixed 1", "other-run: fixed 1"]
    assert not any(n.startswith("warning") for n in same.notes)
    mixed = depth_pareto.combine([fixed, live])
    assert list(mixed.rows["condition"]) == ["fixed 1", "kl<=0.1"]
    assert [n for n in mixed.notes if n.startswith("warning")] == [
        "warning: these rows are measured on different question sets (fixed-run: n = 24; kl-run: n = 8); "
        "accuracies and the front compare different questions"]


class _PlantedRun:
    """A run recorded under a per-turn probe: questions filed under the depth the probe chose, no ``iterations``
    column (the format allows that: each token then ran the row's ``chosen_depth``)."""

    manifest = {"depth_policy": "probe:/some/probe.safetensors"}
    depths = [1, 3]

    def generations(self) -> pd.DataFrame:
        return pd.DataFrame({"question_id": ["a", "b", "c"], "depth": [1, 3, 3], "turn": 0,
                             "token_ids": [[1, 2], [1, 2, 3, 4], [5, 6]], "chosen_depth": [1, 3, 2],
                             "correct": [True, False, True], "stop_reason": "eos"})

    def episodes(self) -> pd.DataFrame:
        gens = self.generations()
        return gens[["question_id", "depth", "correct"]].assign(n_turns=1)


def test_a_policy_run_is_one_live_row_over_every_question_whatever_depth_it_is_filed_under():
    (row,) = depth_pareto.live_rows(_PlantedRun(), "probe-run", wall_s=3.0)
    assert row["condition"] == "probe (per turn)" and row["source"] == "live" and row["n_questions"] == 3
    assert row["accuracy_pct"] == pytest.approx(200 / 3)
    assert row["mean_iterations"] == pytest.approx((1 * 2 + 3 * 4 + 2 * 2) / 8)
    assert row["wall_s"] == 3.0
