"""HaltingProbe architecture and the training recipe (app:halting_training)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sst_interp.kernels.errors import UsageError
from sst_interp.probe.evaluate import evaluate_probe
from sst_interp.probe.model import DEFAULT_THRESHOLD, HaltingProbe, ProbeConfig
from sst_interp.probe.train import TrainConfig, balance_indices, train_probe


def test_parameter_counts_match_paper():
    # sec:halting_probe_method: 53,781 (10 units) and 344,193 (64 units) parameters at d = 5376
    assert HaltingProbe(ProbeConfig(5376, hidden=10)).n_parameters() == 53_781
    assert HaltingProbe(ProbeConfig(5376, hidden=64)).n_parameters() == 344_193
    # sec:halting_probe_feature: Linear(107, 1) has 108 parameters
    assert HaltingProbe(ProbeConfig(5376, hidden=None, dims=tuple(range(107)))).n_parameters() == 108


def test_threshold_is_log_odds_of_03():
    assert DEFAULT_THRESHOLD == pytest.approx(math.log(0.3 / 0.7))
    assert 1 / (1 + math.exp(-DEFAULT_THRESHOLD)) == pytest.approx(0.3)


@pytest.mark.parametrize("act,fn", [("silu", torch.nn.functional.silu), ("gelu", torch.nn.functional.gelu),
                                    ("relu", torch.relu)])
def test_forward_is_linear_act_linear(act, fn):
    probe = HaltingProbe(ProbeConfig(6, hidden=3, activation=act))
    x = torch.randn(5, 6)
    expected = fn(x @ probe.fc1.weight.T + probe.fc1.bias) @ probe.fc2.weight.T + probe.fc2.bias
    torch.testing.assert_close(probe(x), expected[:, 0])


def test_masks_importance_and_direction_by_hand():
    probe = HaltingProbe(ProbeConfig(3, hidden=2))
    with torch.no_grad():
        probe.fc1.weight.copy_(torch.tensor([[1.0, -2.0, 0.0], [0.5, 0.0, 3.0]]))
        probe.fc1.bias.zero_()
        probe.fc2.weight.copy_(torch.tensor([[2.0, -1.0]]))
        probe.fc2.bias.fill_(0.25)
    # importance_i = sum_j |W2_j| |W1_ji| = [2*1 + 1*0.5, 2*2, 1*3]
    assert probe.input_importance().tolist() == [2.5, 4.0, 3.0]
    # W2 W1 = [2*1 - 0.5, -4, -3]
    assert probe.effective_direction().tolist() == [1.5, -4.0, -3.0]
    assert probe.effective_direction(torch.tensor([0.0, 1.0])).tolist() == [-0.5, 0.0, -3.0]
    x = torch.tensor([[1.0, 1.0, 1.0]])
    # zero unit 0 -> only unit 1 contributes: -1 * silu(3.5) + 0.25
    got = probe(x, neuron_mask=torch.tensor([0.0, 1.0]))
    assert got.item() == pytest.approx(-torch.nn.functional.silu(torch.tensor(3.5)).item() + 0.25)
    # zero input dim 2 -> unit 1 sees 0.5
    got = probe(x, input_mask=torch.tensor([1.0, 1.0, 0.0]))
    h = torch.nn.functional.silu(torch.tensor([-1.0, 0.5]))
    assert got.item() == pytest.approx(2 * h[0].item() - h[1].item() + 0.25)


def test_dims_probe_reads_only_its_dims():
    probe = HaltingProbe(ProbeConfig(5, hidden=None, dims=(1, 3)))
    x = torch.zeros(1, 5)
    x[0, [0, 2, 4]] = 100.0
    assert probe(x).item() == pytest.approx(probe.fc2.bias.item())
    with pytest.raises(UsageError, match="size 5"):
        probe(torch.zeros(1, 4))


@pytest.mark.parametrize("kwargs", [{"input_size": 0}, {"input_size": 4, "hidden": 0},
                                    {"input_size": 4, "activation": "tanh"}, {"input_size": 4, "dims": (3, 1)},
                                    {"input_size": 4, "dims": (4,)}])
def test_bad_configs(kwargs):
    with pytest.raises(UsageError):
        ProbeConfig(**kwargs)


def test_balance_duplicates_minority_to_majority():
    y = np.array([0, 1, 0, 0, 0, 0, 1, 0], dtype=bool)  # 6 SAFE, 2 MUST HALT
    idx = balance_indices(y)
    assert len(idx) == 12
    assert (y[idx]).sum() == 6 and (~y[idx]).sum() == 6
    assert sorted(idx[y[idx]].tolist()) == [1, 1, 1, 6, 6, 6]
    with pytest.raises(UsageError, match="both classes"):
        balance_indices(np.zeros(4, dtype=bool))


def test_training_is_deterministic_and_leaves_global_rng(planted):
    config = ProbeConfig(planted.hidden_size, hidden=10)
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a, report = train_probe(planted.x, planted.y, config, TrainConfig(epochs=5))
    after = torch.rand(1)
    b, _ = train_probe(planted.x, planted.y, config, TrainConfig(epochs=5))
    assert torch.equal(before, after)  # training forks the RNG
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    assert report.n_balanced == 2 * planted.labels.n_safe
    assert report.config == {"lr": 1e-3, "batch_size": 32, "epochs": 5, "seed": 42, "threads": 1}
    c, _ = train_probe(planted.x, planted.y, config, TrainConfig(epochs=5, seed=7))
    assert not torch.equal(a.fc1.weight, c.fc1.weight)


def test_trained_probe_reads_planted_feature(planted, planted_probe):
    ev = evaluate_probe(planted_probe, planted)
    # every MUST HALT timestep detected, every SAFE left alone, so no overthinks and no misses
    assert ev.detection.halt_detected == planted.labels.n_must_halt
    assert ev.detection.safe_left_alone == planted.labels.n_safe
    assert ev.outcome.overthinks == 0
    assert ev.outcome.missed == 0
    assert ev.outcome.n_correct == ev.outcome.staged_correct == 32


def test_training_rejects_bad_data():
    config = ProbeConfig(3, hidden=2)
    with pytest.raises(UsageError, match="input_size"):
        train_probe(np.zeros((4, 2)), np.array([0, 1, 0, 1]), config)
    x = np.zeros((4, 3))
    x[0, 0] = np.nan
    with pytest.raises(UsageError, match="NaN"):
        train_probe(x, np.array([0, 1, 0, 1]), config)
