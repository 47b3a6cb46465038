"""Saving/loading probes (safetensors + JSON) and the generation-time depth policy."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from sst_interp.kernels.errors import UsageError
from sst_interp.model import SSTConfig, SSTModel
from sst_interp.model.depth_policy import DepthPolicy
from sst_interp.model.generation import GenerationConfig, generate
from sst_interp.model.testing import tiny_llama
from sst_interp.probe.io import ProbeMeta, load_probe, save_probe
from sst_interp.probe.model import DEFAULT_THRESHOLD, HaltingProbe, ProbeConfig
from sst_interp.probe.policy import ProbeDepth


def _probe(d: int = 8, bias: float = 0.0, hidden: int | None = 3, dims=None) -> HaltingProbe:
    torch.manual_seed(0)
    probe = HaltingProbe(ProbeConfig(d, hidden=hidden, activation="gelu", dims=dims))
    with torch.no_grad():
        probe.fc2.bias.fill_(bias)
    return probe.eval()


@pytest.mark.parametrize("hidden,dims", [(3, None), (None, (1, 4, 6))])
def test_round_trip(tmp_path, hidden, dims):
    probe = _probe(hidden=hidden, dims=dims)
    meta = ProbeMeta(layer=5, threshold=-0.5, max_depth=3, provenance={"run": "runs/x", "n_must_halt": 7})
    folder = save_probe(tmp_path / "p", probe, meta)
    assert sorted(f.name for f in folder.iterdir()) == ["probe.json", "probe.safetensors"]
    for target in (folder, folder / "probe.safetensors", folder / "probe.json"):
        loaded, meta2 = load_probe(target)
        assert meta2 == meta
        assert loaded.config == probe.config
        x = torch.randn(4, 8)
        torch.testing.assert_close(loaded(x), probe(x), rtol=0, atol=0)
    payload = json.loads((folder / "probe.json").read_text())
    assert payload["format"] == "sst_interp.halting_probe" and payload["layer"] == 5


def test_load_errors(tmp_path):
    with pytest.raises(UsageError, match="no probe"):
        load_probe(tmp_path / "missing")
    folder = save_probe(tmp_path / "p", _probe(), ProbeMeta(layer=1))
    sidecar = json.loads((folder / "probe.json").read_text())
    sidecar["config"]["hidden"] = 5
    (folder / "probe.json").write_text(json.dumps(sidecar))
    with pytest.raises(UsageError, match="does not match"):
        load_probe(folder)
    (folder / "probe.json").write_text("{not json")
    with pytest.raises(UsageError, match="not valid JSON"):
        load_probe(folder)


def test_policy_follows_protocol(tmp_path):
    probe = _probe(bias=10.0)
    policy = ProbeDepth(probe, DEFAULT_THRESHOLD, layer=1, max_depth=4, source="p")
    assert isinstance(policy, DepthPolicy)
    hidden = torch.zeros(2, 8)
    hidden[1] = 1.0
    with torch.no_grad():
        probe.fc1.weight.zero_()
        probe.fc1.bias.zero_()
        probe.fc1.weight[0, 0] = 10.0  # unit 0 = gelu(10 x_0)
        probe.fc2.weight.zero_()
        probe.fc2.weight[0, 0] = -100.0  # row 0: logit 10 (halt); row 1: 10 - 1000 (continue)
    halts = policy.should_halt(1, hidden)
    assert halts.dtype == torch.bool and halts.tolist() == [True, False]
    assert policy.should_halt(4, hidden).tolist() == [True, True]  # i_max reached
    assert policy.describe().startswith("probe:p@layer1")
    with pytest.raises(UsageError):
        policy.should_halt(1, None)
    save_probe(tmp_path / "saved", probe, ProbeMeta(layer=1, threshold=0.25, max_depth=3))
    loaded = ProbeDepth.from_path(tmp_path / "saved")
    assert (loaded.probe_layer, loaded.threshold, loaded.max_depth) == (1, 0.25, 3)
    assert ProbeDepth.from_path(tmp_path / "saved", max_depth=2).max_depth == 2


@pytest.mark.parametrize("bias,expected_depth", [(10.0, 1), (-10.0, 3)])
def test_policy_drives_generation(bias, expected_depth):
    # A probe that always halts gives depth 1; one that never halts runs to max_depth.
    sst = SSTModel.from_backbone(tiny_llama(dtype=torch.float32), SSTConfig(state_scale="hidden"))
    probe = _probe(d=sst.hidden_size, bias=bias)
    with torch.no_grad():
        probe.fc2.weight.zero_()
    seen: list[int] = []

    class Spy(ProbeDepth):
        def should_halt(self, iteration, hidden):
            seen.append(iteration)
            assert hidden.shape == (1, sst.hidden_size)
            return super().should_halt(iteration, hidden)

    policy = Spy(probe, DEFAULT_THRESHOLD, layer=1, max_depth=3)
    out = generate(sst, [[2, 5, 7, 9]], depth=policy, config=GenerationConfig(max_new_tokens=3))
    assert out.chosen_depth == [expected_depth]
    assert seen == list(range(1, expected_depth + 1))
    assert np.all([len(t) == 3 for t in out.token_ids])
