"""``python -m sst_interp.probe policies`` and the per-position depth measurements on recorded tiny runs: the
replay's exactness is the offline simulation's, live rows come from what the live run recorded, bad input is one
``error:`` line, and the report draws the table and figures (issue 23, item 4)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sst_interp.analyses import depth_pareto, depth_replay, depth_trajectories
from sst_interp.model.halting import parse_position_policy
from sst_interp.cli.probe import main as probe_main
from sst_interp.probe.policy_simulation import simulate_policy
from sst_interp.cli.record import main as record_main
from sst_interp.store import Run
from tests.unit.conftest import FAST, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

MAX = 3
VOCAB = 128  # the tiny models' vocabulary: --top-k VOCAB keeps the whole distribution, so kl can be replayed


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    model = save_tiny_model(root / "tiny")
    common = [*FAST, "--model", str(model), "--demo-preset", "--limit", "6", "--batch-size", "2",
              "--top-k", str(VOCAB), "--full-positions", "5", "--max-new-tokens", "5"]
    record_main([*common, "--depths", f"1,{MAX}", "--out", str(root / "flat")])
    record_main([*common, "--depths", ",".join(map(str, range(1, MAX + 1))), "--out", str(root / "flat123")])
    flat = Run.open(root / "flat")
    traj = depth_trajectories.collect_trajectories(flat)
    tau = depth_replay.sweep_thresholds(traj, "entropy", (0.5,))[0]
    text = f"entropy:{tau!r},max={MAX}"
    record_main([*common, "--depths", str(MAX), "--depth-policy", text, "--out", str(root / "live")])
    return root, flat, traj, text


@pytest.mark.parametrize("rule", ["kl", "entropy", "margin", "state"])
def test_replay_claims_exactly_what_the_offline_simulation_claims(recorded, rule):
    _, flat, traj, _ = recorded
    taus = depth_replay.sweep_thresholds(traj, rule)
    assert len(taus) >= 3
    for tau in taus:
        policy = parse_position_policy(f"{rule}:{tau!r},max={MAX}", MAX)
        halt = depth_replay.halting_iterations(traj, policy)
        exact = depth_replay.exact_questions(traj, halt)
        sims = simulate_policy(flat, policy)
        by_question: dict[str, bool] = {}
        for sim in sims:
            by_question[sim.question_id] = by_question.get(sim.question_id, True) and not sim.diverged
            rows = traj.index[(traj.index["question_id"] == sim.question_id) & (traj.index["turn"] == sim.turn)]
            # every position the simulation vouches for stops where the replay says
            assert halt[rows.index[:len(sim.iterations)]].tolist() == sim.iterations
        assert exact.to_dict() == by_question, (rule, tau)


def test_kl_zero_replays_the_full_depth_run_and_kl_inf_stops_at_two(recorded):
    _, flat, traj, _ = recorded
    rows = pd.DataFrame(depth_pareto.simulated_rows(flat, "flat", traj, [parse_position_policy(f"kl:0,max={MAX}", MAX),
                                                                  parse_position_policy(f"kl:inf,max={MAX}", MAX)]))
    fixed = depth_pareto.live_rows(flat, "flat")
    full = next(r for r in fixed if r["condition"] == f"fixed {MAX}")
    never, always = rows.iloc[0], rows.iloc[1]
    assert never["exact_questions"] == never["n_questions"] == 6 and never["mean_iterations"] == MAX
    assert never["accuracy_low_pct"] == never["accuracy_high_pct"] == full["accuracy_pct"]
    assert always["mean_iterations"] == 2.0


def test_live_rows_read_what_the_live_run_recorded(recorded):
    root, flat, traj, text = recorded
    live = Run.open(root / "live")
    (row,) = depth_pareto.live_rows(live, "live", wall_s=12.5)
    gens = live.generations()
    counts = np.concatenate([np.asarray(c) for c in gens["iterations"]])
    assert row["source"] == "live" and row["policy"] == live.manifest["depth_policy"]
    assert row["mean_iterations"] == pytest.approx(counts.mean()) and 1 <= counts.min() and counts.max() <= MAX
    assert row["wall_s"] == 12.5 and row["n_questions"] == 6
    # the replay's bounds hold the live accuracy, and its exact questions end as the live run does
    policy = parse_position_policy(text, MAX)
    (sim,) = depth_pareto.simulated_rows(flat, "flat", traj, [policy])
    assert sim["accuracy_low_pct"] <= row["accuracy_pct"] <= sim["accuracy_high_pct"]
    exact = depth_replay.exact_questions(traj, depth_replay.halting_iterations(traj, policy))
    full_gens = flat.generations()
    for qid in exact[exact].index:
        mine = gens[gens["question_id"] == qid].sort_values("turn")["token_ids"].map(list).tolist()
        theirs = full_gens[(full_gens["question_id"] == qid) & (full_gens["depth"] == MAX)].sort_values("turn")
        assert mine == theirs["token_ids"].map(list).tolist()


def test_policies_command_writes_the_table_and_figure(recorded, capsys, tmp_path):
    root, _, _, text = recorded
    out = tmp_path / "sweep"
    code = probe_main(["policies", "--run", str(root / "flat"), "--rules", "entropy,state", "--quantiles",
                       "0.25,0.75", "--policy", f"margin:0.5,max={MAX}", "--live", f"{root / 'live'}=7.5",
                       "--out", str(out)])
    assert code == 0
    table = pd.read_csv(out / "tab_depth_pareto.csv")
    assert list(table.columns) == list(depth_pareto.PARETO_COLUMNS)
    assert table["source"].value_counts().to_dict() == {"live": 3, "oracle": 1, "simulated": 5}
    live = table[table["run"] == "live"].iloc[0]
    assert live["wall_s"] == 7.5 and live["policy"] == parse_position_policy(text, MAX).describe()
    assert (out / "fig_depth_pareto_front.png").stat().st_size > 10_000
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("flags", [
    ["--rules", "bogus"], ["--rules", "probe-pos"], ["--policy", "kl:-1"], ["--policy", "max=0"],
    ["--policy", "wobble:0.3"], ["--policy", "probe-pos:/no/such/probe"], ["--policy", f"kl:0.1,max={MAX + 1}"],
    ["--quantiles", "0,0.5"], ["--live", "x=abc"], ["--live", "/no/such/run"],
])
def test_bad_input_is_one_error_line_and_exit_2_with_nothing_written(recorded, capsys, tmp_path, flags):
    root, _, _, _ = recorded
    with pytest.raises(SystemExit) as exit_info:
        probe_main(["policies", "--run", str(root / "flat"), *flags, "--out", str(tmp_path / "bad")])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and not captured.out, err
    assert not (tmp_path / "bad").exists()


def test_the_command_defaults_are_the_librarys():
    from sst_interp.cli.policies import QUANTILES

    assert QUANTILES == depth_replay.QUANTILES


def test_a_policy_run_cannot_be_swept_and_says_why(recorded, capsys, tmp_path):
    root, _, _, _ = recorded
    with pytest.raises(SystemExit):
        probe_main(["policies", "--run", str(root / "live"), "--out", str(tmp_path / "bad")])
    assert "replaying rules needs a fixed-depth run" in capsys.readouterr().err


def test_report_draws_the_depth_artefacts_over_every_run(recorded, tmp_path):
    from sst_interp.cli.report import main as report_main

    root, _, _, _ = recorded
    out = tmp_path / "report"
    assert report_main(["--run", str(root / "flat"), "--run", str(root / "live"), "--out", str(out), "--quiet",
                        "--only", "tab_depth*,fig_depth*"]) == 0
    table = pd.read_csv(out / "tab_depth_pareto.csv")
    assert set(table["run"]) == {"flat", "live"}
    assert table.loc[table["run"] == "live", "source"].tolist() == ["live"]
    assert list(out.glob("fig_depth_pareto_front*.png")) and list(out.glob("fig_depth_policy_histogram*.png"))
    assert list(out.glob("tab_depth_policy_convergence*.csv"))


def _probe_at(path, hidden_size, threshold):
    """A random probe at layer 1 that halts where its logit exceeds ``threshold``."""
    import torch

    from sst_interp.probe.io import ProbeMeta, save_probe
    from sst_interp.probe.model import HaltingProbe, ProbeConfig

    torch.manual_seed(3)
    save_probe(path, HaltingProbe(ProbeConfig(input_size=hidden_size, hidden=4)).eval(),
               ProbeMeta(layer=1, threshold=threshold, max_depth=MAX))
    return path


def test_a_per_turn_probe_replayed_on_flat_runs_is_the_flat_depth_it_picks(recorded, tmp_path):
    from sst_interp.probe.policy_sweep import SweepConfig, probe_row, sweep

    root, _, _, _ = recorded
    run = Run.open(root / "flat123")
    fixed = {r["condition"]: r for r in depth_pareto.live_rows(run, "flat123")}
    always = probe_row(run, "flat123", _probe_at(tmp_path / "always", run.hidden_size, -1e9))
    never = probe_row(run, "flat123", _probe_at(tmp_path / "never", run.hidden_size, 1e9))
    for row, depth in ((always, 1), (never, MAX)):
        assert row["source"] == "replayed" and row["n_questions"] == 6
        assert row["mean_iterations"] == depth
        assert row["accuracy_pct"] == fixed[f"fixed {depth}"]["accuracy_pct"]
    table = sweep(SweepConfig(run=root / "flat123", rules=("entropy",), probe=tmp_path / "never")).table()
    assert table["source"].tolist().count("replayed") == 1
    with pytest.raises(SystemExit):
        probe_main(["policies", "--run", str(root / "flat123"), "--probe", str(tmp_path / "none"), "--out",
                    str(tmp_path / "bad")])
    assert not (tmp_path / "bad").exists()
