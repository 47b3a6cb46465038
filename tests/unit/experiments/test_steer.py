"""Experiment c: the probe's direction, added at its layer at iterations 2..k, moves exactly that state by
scale x r x u; the table pairs each scale with the clean run."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from sst_interp.cli.intervene import main
from sst_interp.kernels.errors import UsageError
from sst_interp.experiments.manifest import read_manifest
from sst_interp.experiments.steer import probe_direction
from sst_interp.probe.io import ProbeMeta, save_probe
from sst_interp.probe.model import HaltingProbe, ProbeConfig
from sst_interp.store import Run
from sst_interp.model.backbone import backbone_identity
from tests.unit.conftest import fails_with_one_error_line, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")
D = 32  # the tiny model's hidden size
LAYER = 1


def _probe(folder, hidden=None, dims=None, layer=LAYER, seed=0, model=None, positives=10):
    """A random probe; ``model`` (a model folder) records a training run of that model in its provenance."""
    torch.manual_seed(seed)
    probe = HaltingProbe(ProbeConfig(input_size=D, hidden=hidden, dims=dims))
    provenance = {} if model is None else {"identity": {"model": backbone_identity(str(model))},
                                           "n_must_halt": positives}
    save_probe(folder, probe, ProbeMeta(layer=layer, provenance=provenance))
    return probe


def test_the_direction_is_the_probes_input_gradient(tmp_path):
    linear = _probe(tmp_path / "linear")
    u, layer = probe_direction(tmp_path / "linear", D, 3)
    w = linear.fc2.weight.detach().double().numpy().ravel()
    np.testing.assert_allclose(u, w / np.linalg.norm(w), rtol=1e-6)
    assert layer == LAYER
    mlp = _probe(tmp_path / "mlp", hidden=10, dims=(1, 4, 9))
    u, _ = probe_direction(tmp_path / "mlp", D, 3)
    w = (mlp.fc2.weight.detach().double() @ mlp.fc1.weight.detach().double()).numpy().ravel()
    expected = np.zeros(D)
    expected[[1, 4, 9]] = w / np.linalg.norm(w)
    np.testing.assert_allclose(u, expected, rtol=1e-6, atol=1e-12)
    with pytest.raises(UsageError, match="d = 32; this model's are d = 64"):
        probe_direction(tmp_path / "linear", 64, 3)
    _probe(tmp_path / "deep", layer=5)
    with pytest.raises(UsageError, match="reads layer 5; this model has 3 layers"):
        probe_direction(tmp_path / "deep", D, 3)


def test_steering_adds_scale_times_radius_times_direction(tmp_path, capsys):
    model = save_tiny_model(tmp_path / "model")
    _probe(tmp_path / "probe", model=model)
    out = tmp_path / "exp"
    argv = ["steer", "--out", str(out), "--model", str(model), "--demo-preset", "--prompt-mode", "sequential",
            "--limit", "4", "--batch-size", "2", "--max-new-tokens", "5", "--full-positions", "2", "--top-k", "6",
            "--device", "cpu", "--depth", "3", "--probe", str(tmp_path / "probe"), "--scales=-2,0,2",
            "--resamples", "200", "--random-directions", "1"]
    assert main(argv) == 0
    table = pd.read_parquet(out / "steer.parquet").set_index("condition")
    assert list(table.index) == ["clean", "scale-2", "scale+2", "random0-2", "random0+2"]
    assert list(table["direction"]) == ["clean", "probe", "probe", "random 0", "random 0"]
    # the control: a random direction of the same norm, its change beside the probe's at each scale
    for scale in ("-2", "+2"):
        assert table.loc[f"scale{scale}", "random_logprob_change_min"] == table.loc[
            f"random0{scale}", "logprob_change_bound_high"]
    assert set(table.loc[["scale-2", "scale+2"], "correction"]) == {"holm over 2 cells"}
    assert table.loc["clean", "broken"] == table.loc["clean", "fixed"] == 0
    assert table.loc["clean", "regressions_change"] == table.loc["clean", "recoveries_change"] == 0
    manifest = read_manifest(out, "steer")
    radius = manifest["sources"]["probe"]["state_norm"]
    shift = np.load(out / "direction.npy")
    assert np.linalg.norm(shift) == pytest.approx(radius, rel=1e-5)
    random = np.load(out / "direction-random0.npy")
    assert np.linalg.norm(random) == pytest.approx(radius, rel=1e-5) and abs(random @ shift) < 0.9 * radius ** 2
    clean, steered = Run.open(out / "runs" / "clean"), Run.open(out / "runs" / "scale+2")
    for before, after in zip(clean.hidden(3, positions=[0]), steered.hidden(3, positions=[0])):
        layer = int(np.flatnonzero(before.layers == LAYER)[0])
        # iteration 1 and the layer below are untouched; iteration 2 of the probe's layer moves by exactly 2 r u
        np.testing.assert_array_equal(after.values[0, 0], before.values[0, 0])
        np.testing.assert_array_equal(after.values[0, 1, :layer], before.values[0, 1, :layer])
        np.testing.assert_allclose(after.values[0, 1, layer] - before.values[0, 1, layer], 2 * shift, atol=1e-5)


@pytest.mark.parametrize("provenance, pattern", [
    (dict(model="another"), "was trained on a run of another model (model"),
    (dict(positives=1), "was trained on 1 must-halt example(s); steering needs a direction learnt from at least 5"),
    (dict(), "records no run it was trained on"),
], ids=["another-model", "one-positive", "no-provenance"])
def test_steer_refuses_a_probe_of_another_model_or_too_few_positives(tmp_path, capsys, provenance, pattern):
    model = save_tiny_model(tmp_path / "model")
    trained_on = {"another": tmp_path / "other"}.get(provenance.pop("model", None), model)
    if not provenance and pattern.startswith("records no run"):
        trained_on = None
    _probe(tmp_path / "probe", model=trained_on, **provenance)
    out = tmp_path / "exp"
    argv = ["steer", "--out", str(out), "--model", str(model), "--demo-preset", "--limit", "2", "--max-new-tokens",
            "3", "--full-positions", "2", "--device", "cpu", "--depth", "2", "--probe", str(tmp_path / "probe")]
    fails_with_one_error_line(capsys, main, argv, pattern)
    assert not out.exists()
