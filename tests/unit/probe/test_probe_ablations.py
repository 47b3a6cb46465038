"""Neuron analysis and input-dimension ablation (tab:halting_probe_ablation_sweep, app:halting_input_ablation)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from sst_interp.kernels.errors import UsageError
from sst_interp.probe.ablation import neuron_analysis, neuron_contributions
from sst_interp.probe.dataset import ProbeData
from sst_interp.probe.evaluate import evaluate_probe
from sst_interp.probe.features import feature_grid, greedy_prune, importance_ranking, topk_sweep, train_linear_on
from sst_interp.probe.labels import make_labels
from sst_interp.probe.model import HaltingProbe, ProbeConfig
from tests.unit.probe.planted import PLANTED_DIMS


def test_neuron_contribution_by_hand():
    probe = HaltingProbe(ProbeConfig(2, hidden=2, activation="relu"))
    with torch.no_grad():
        probe.fc1.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
        probe.fc1.bias.zero_()
        probe.fc2.weight.copy_(torch.tensor([[2.0, -3.0]]))
    x = np.array([[1.0, 2.0], [3.0, -1.0]], dtype=np.float32)
    # relu -> [[1, 2], [3, 0]]; |act * W2| -> [[2, 6], [6, 0]]; mean over rows -> [4, 3]
    assert neuron_contributions(probe, x).tolist() == [4.0, 3.0]


def test_greedy_pruning_recovers_planted_dims(planted, planted_probe):
    sweep = topk_sweep(planted_probe, planted)
    assert sweep.baseline == evaluate_probe(planted_probe, planted).outcome.key()
    assert sweep.minimal_k is not None
    table = sweep.table()
    # the minimal K reproduces the baseline and K - 1 does not (binary search between grid points)
    by_k = table.set_index("K")
    assert by_k.loc[sweep.minimal_k, "baseline_match"]
    assert not by_k.loc[sweep.minimal_k - 1, "baseline_match"]
    assert by_k.loc[planted.hidden_size, "baseline_match"]
    prune = greedy_prune(planted_probe, planted, sweep.minimal_k)
    assert prune.essential.tolist() == sorted(PLANTED_DIMS)
    assert prune.final == prune.baseline
    counts = prune.table().set_index("item")["count"]
    assert counts.iloc[0] == sweep.minimal_k and counts.iloc[2] == len(PLANTED_DIMS)
    assert counts.iloc[1] == sweep.minimal_k - len(PLANTED_DIMS)


def test_linear_probe_on_essential_set(planted):
    probe, _ = train_linear_on(planted, PLANTED_DIMS)
    assert probe.is_linear and probe.n_parameters() == len(PLANTED_DIMS) + 1
    ev = evaluate_probe(probe, planted)
    assert ev.outcome.overthinks == 0
    imp, ranking = importance_ranking(probe)
    assert set(np.flatnonzero(imp).tolist()) == set(PLANTED_DIMS)


def test_binary_search_on_handmade_probe():
    # A linear probe whose logit is ~ the sum of dims 0..3 minus 4: the question halts at iteration 1
    # (logit 0.1 > log(0.3/0.7)) only if all four feature dims are kept (three give -0.91), so the
    # minimal K is exactly 4 (dims ranked 0, 1, 2, 3 by weight).
    d = 40
    probe = HaltingProbe(ProbeConfig(d, hidden=None))
    with torch.no_grad():
        w = torch.zeros(d)
        w[:4] = torch.tensor([1.04, 1.03, 1.02, 1.01])
        w[4:] = 1e-3
        probe.fc2.weight.copy_(w[None])
        probe.fc2.bias.fill_(-4.0)
    correct = pd.DataFrame({1: [True], 2: [False]}, index=pd.Index(["q"], name="question_id"))
    labels = make_labels(correct, pd.DataFrame([("q", 1, 0), ("q", 2, 0)], columns=["question_id", "depth", "turn"]))
    state = np.zeros(d, dtype=np.float32)
    state[:4] = 1.0
    data = ProbeData(0, labels, state[None], np.stack([state, np.zeros(d, np.float32)])[None])
    sweep = topk_sweep(probe, data, ks=[1, 2, 8, 16, 32])
    assert sweep.minimal_k == 4
    evaluated = sweep.table()["K"].tolist()
    # grid 1, 2, 8, 16, 32 and d = 40; 2 fails and 8 matches, so the search probes 5, 3, 4
    assert evaluated == [1, 2, 3, 4, 5, 8, 16, 32, 40]
    prune = greedy_prune(probe, data, sweep.minimal_k)
    assert prune.essential.tolist() == [0, 1, 2, 3]


def test_neuron_ablation_sweep(planted, planted_probe):
    analysis = neuron_analysis(planted_probe, planted, keep_counts=(2, 5, 64), top=5)
    table = analysis.table()
    names = table["configuration"].tolist()
    lead = int(analysis.ranking[0])
    assert names == ["Top 2 neurons", "Top 5 neurons", "Full probe (all 10)",
                     f"Remove neuron {lead} (top-4 only)", f"Keep only {lead} + minor (zero other top-4)"]
    full = table.iloc[2]
    baseline = evaluate_probe(planted_probe, planted).row()
    assert full["correct"] == baseline["correct"] and full["overthinks"] == baseline["overthinks"]
    assert table["kept"].tolist() == [2, 5, 10, 4, 6]
    # contributions are ranked and shares add up to 1
    contrib = analysis.contribution_table()
    assert contrib["contribution"].is_monotonic_decreasing
    assert contrib["cumulative_share"].iloc[-1] == pytest.approx(1.0)
    assert analysis.mass_share(10) == pytest.approx(1.0)
    assert -1.0 <= analysis.direction_r_gradient <= 1.0 and -1.0 <= analysis.direction_r_ablated <= 1.0


def test_neuron_analysis_needs_hidden_units(planted):
    probe = HaltingProbe(ProbeConfig(planted.hidden_size, hidden=None))
    with pytest.raises(UsageError, match="hidden units"):
        neuron_analysis(probe, planted)


def test_feature_grid_layout():
    importance = np.arange(5376, dtype=np.float64)
    grid = feature_grid(importance, [9, 64, 5364])
    assert grid.grid.shape == (84, 64)  # the paper's 84 x 64 grid
    assert np.isfinite(grid.grid).sum() == 3
    table = grid.table()
    assert table[["dim", "row", "col"]].values.tolist() == [[9, 0, 9], [64, 1, 0], [5364, 83, 52]]
    assert grid.grid[83, 52] == 5364.0


def test_activation_swap_rows(planted):
    from sst_interp.probe.sweeps import activation_swap

    swap = activation_swap(planted, hidden=10, with_loocv=False)
    table = swap.table()
    assert table["activation"].tolist() == ["silu", "gelu", "relu"]
    # the planted feature is linear: every activation reads it without overthinks
    assert (table["overthinks"] == 0).all()
    assert table["loocv_p"].isna().all()
