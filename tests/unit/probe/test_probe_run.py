"""Run-level probe: synthetic runs with a halting feature planted in chosen dims (sst_interp.synthetic)."""

from __future__ import annotations

import numpy as np
import pytest

from sst_interp.cli.probe import main
from sst_interp.probe.dataset import load_probe_data, load_probe_data_layers
from sst_interp.probe.evaluate import evaluate_probe
from sst_interp.probe.features import greedy_prune, importance_ranking, topk_sweep
from sst_interp.probe.io import load_probe
from sst_interp.probe.loocv import loocv
from sst_interp.probe.model import ProbeConfig
from sst_interp.probe.sweeps import layer_sweep, select_layer
from sst_interp.probe.train import train_probe
from sst_interp.store import Run
from sst_interp.synthetic import SyntheticSpec, write_synthetic_run

DIMS = (5, 17, 30)
SMALL = dict(n_questions=40, num_layers=4, hidden_size=48, full_positions=1, top_k=8, vocab_size=256,
             batch_questions=40, extra_tokens=2, seed=1)


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("probe") / "planted"
    truth = write_synthetic_run(path, SyntheticSpec(halting_dims=DIMS, halting_strength=3.0, **SMALL))
    return Run.open(path), truth


@pytest.fixture(scope="module")
def planted_run_data(planted_run):
    run, truth = planted_run
    return load_probe_data(run)


def test_default_layer_is_papers_and_holds_the_feature(planted_run, planted_run_data):
    run, truth = planted_run
    assert planted_run_data.layer == truth.halting_layer == 1  # layer 15 of 62 -> 1 of 4


def test_labels_match_planted_truth(planted_run, planted_run_data):
    _, truth = planted_run
    data = planted_run_data
    qi = {q: i for i, q in enumerate(truth.question_ids)}
    correct = np.asarray(truth.correct, dtype=bool)
    expected = set()
    for q, i in qi.items():
        if correct[i].any():
            c = int(np.argmax(correct[i])) + 1
            for d in range(1, c + 1):
                expected.add((q, d, bool(truth.halt[i, d - 1])))
    ts = data.labels.timesteps
    got = {(q, int(d), bool(m)) for q, d, m in ts[["question_id", "depth", "must_halt"]].itertuples(index=False)}
    assert got == expected
    assert data.labels.n_must_halt == sum(m for _, _, m in expected) > 0
    # the planted dims hold +strength at MUST HALT and -strength at SAFE timesteps (jitter <= 0.2)
    signs = np.where(data.y, 1.0, -1.0)
    assert np.all(np.abs(data.x[:, list(DIMS)] - 3.0 * signs[:, None]) <= 0.2 + 1e-6)
    # evaluation states: iteration d of the first turn; for d <= c they are the training timesteps
    first = ts[ts["turn"] == 0]
    rows = first.index.to_numpy()
    np.testing.assert_array_equal(
        data.x[rows], data.eval_x[[qi[q] for q in first["question_id"]], first["depth"].to_numpy() - 1])


def test_probe_on_run_zero_overthinks_and_recovers_dims(planted_run_data):
    data = planted_run_data
    probe, _ = train_probe(data.x, data.y, ProbeConfig(data.hidden_size, hidden=10))
    ev = evaluate_probe(probe, data)
    assert ev.outcome.overthinks == 0 and ev.outcome.missed == 0
    assert ev.outcome.n_correct == ev.outcome.staged_correct
    _, ranking = importance_ranking(probe)
    assert set(ranking[: len(DIMS)].tolist()) == set(DIMS)
    sweep = topk_sweep(probe, data)
    prune = greedy_prune(probe, data, sweep.minimal_k)
    # the synthetic feature is redundant across its dims, so the essential set is a non-empty subset of them
    assert 0 < len(prune.essential) and set(prune.essential.tolist()) <= set(DIMS)
    assert prune.final == prune.baseline


def test_loocv_on_run_beats_base_rate(planted_run_data):
    result = loocv(planted_run_data, ProbeConfig(planted_run_data.hidden_size, hidden=10))
    assert result.n_folds == len(planted_run_data.labels.must_halt_questions)
    assert result.p_value < 0.01
    assert result.p_value_depth_matched < 0.01


def test_loocv_without_feature_is_not_significant(tmp_path):
    path = tmp_path / "plain"
    write_synthetic_run(path, SyntheticSpec(halting_dims=(), **SMALL))
    data = load_probe_data(Run.open(path))
    result = loocv(data, ProbeConfig(data.hidden_size, hidden=10))
    assert result.p_value > 0.05


def test_layer_sweep_picks_planted_layer(planted_run):
    run, truth = planted_run
    data = load_probe_data_layers(run, [1, 3])
    sweep = layer_sweep(data, ProbeConfig(run.hidden_size, hidden=10), loocv_layers=[1])
    rows = sweep.table().set_index("layer")
    assert rows.loc[1, "overthinks"] == 0 and rows.loc[1, "missed"] == 0
    assert rows.loc[1, "correct"] > rows.loc[3, "correct"]
    assert np.isnan(rows.loc[3, "loocv_p"])
    assert select_layer(sweep) == truth.halting_layer


def test_cli_train_then_evaluate(planted_run, tmp_path, capsys):
    run, _ = planted_run
    out = tmp_path / "trained"
    assert main(["train", "--run", str(run.path), "--out", str(out)]) == 0
    probe, meta = load_probe(out)
    assert meta.layer == 1 and meta.max_depth == 4 and probe.n_hidden == 10
    assert meta.provenance["n_must_halt"] > 0 and meta.provenance["train"]["config"]["seed"] == 42
    for name in ("tab_halting_probe.csv", "tab_halting_probe_per_iter.csv", "fig_halt_signal.csv", "summary.json"):
        assert (out / name).is_file()
    assert main(["evaluate", "--run", str(run.path), "--probe", str(out), "--out", str(tmp_path / "ev")]) == 0
    assert (tmp_path / "ev" / "tab_halting_probe.csv").read_text() == (out / "tab_halting_probe.csv").read_text()
    assert "Halt signal probe (layer 1)" in capsys.readouterr().out


def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "no_regressions"
    spec = SyntheticSpec(halting_dims=(), correct=np.ones((4, 4), dtype=bool), **{**SMALL, "n_questions": 4})
    write_synthetic_run(path, spec)
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--run", str(path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "no MUST HALT" in err and "\n" not in err
    with pytest.raises(SystemExit) as exit_info:
        main(["loocv", "--run", str(tmp_path / "nowhere")])
    assert exit_info.value.code == 2
    capsys.readouterr()
    for command in ("loocv", "sweep"):
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--run", str(path), "--permutation-alpha", "2", "--out", str(tmp_path / command)])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: --permutation-alpha must be between 0 and 1") and "\n" not in err
        assert not (tmp_path / command).exists()
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--run", str(path), "--layer", "9"])
    assert exit_info.value.code == 2
    assert "outside" in capsys.readouterr().err


def test_cli_loocv_sweep_ablate(planted_run, tmp_path):
    import json

    import pandas as pd

    run, truth = planted_run
    assert main(["loocv", "--run", str(run.path), "--out", str(tmp_path / "cv"), "--permutations", "9"]) == 0
    cv = pd.read_csv(tmp_path / "cv" / "app_halting_loocv.csv").iloc[0]
    assert cv["folds"] == len(pd.read_csv(tmp_path / "cv" / "app_halting_loocv_folds.csv")) and cv["p_value"] < 0.01
    # 9 permutations: the smallest permutation p is 1/10, reached when no permuted LOOCV does as well
    assert cv["permutations"] == 9 and cv["p_permutation"] == pytest.approx(0.1)
    # the table says how the sequential test ended, and that 9 draws cannot reach 0.05 at all
    assert "all 9 draws" in cv["permutation_stop"] and "smallest p is 1/10" in cv["permutation_stop"]
    assert cv["label_arrangements"] >= 20
    assert pd.read_csv(tmp_path / "cv" / "cover_bound.csv")["shatter_capacity"].iloc[0] == 11
    common = ["--run", str(run.path), "--hidden", "10"]
    assert main(["sweep", *common, "--layers", "1,3", "--out", str(tmp_path / "sw")]) == 0
    sweep = pd.read_csv(tmp_path / "sw" / "tab_halting_probe_layer_sweep.csv")
    assert sweep["layer"].tolist() == [1, 3]
    assert main(["ablate", *common, "--keep", "2,4", "--out", str(tmp_path / "ab")]) == 0
    summary = json.loads((tmp_path / "ab" / "summary.json").read_text())
    assert set(summary["essential_dims"]) <= set(DIMS) and summary["essential_dims"]
    assert summary["linear_probe"]["overthinks"] == 0
    for name in ("tab_halting_probe_ablation_sweep", "tab_halting_probe_topk_sweep", "tab_halting_probe_greedy_prune",
                 "fig_feature_position_grid", "halting_probe_neuron_contributions"):
        assert (tmp_path / "ab" / f"{name}.csv").is_file()
