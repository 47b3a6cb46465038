"""The ``feature`` operation (issue 55 item 5): ablate, steer and patch a dictionary's features at a site, keeping the
reconstruction error. On the tiny float64 SST: a no-op edit (steer by 0, a patch from the row itself) is the clean run
bit for bit; an ablation moves the state by exactly -a_f W_dec[f] with a_f computed by hand; a set value and a live
patch from another row move it by (a'_f - a_f) W_dec[f]; the same on a natively looping family. The spec round-trips
through JSON and YAML, the dictionary is loaded once per Intervener, and a dictionary that does not fit the site is
one UsageError line."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from safetensors.torch import load_file

pytest.importorskip("sae_lens")

from sst_interp.features.meta import SIDECAR as FEATURES_SIDECAR  # noqa: E402
from sst_interp.interventions import InterventionSpec, Operation, Site  # noqa: E402
from sst_interp.interventions import feature_edits  # noqa: E402
from sst_interp.interventions.checks import patch_runs  # noqa: E402
from sst_interp.interventions.compiled import spec_refusal  # noqa: E402
from sst_interp.interventions.loops import intervene_loop  # noqa: E402
from sst_interp.kernels.errors import UsageError  # noqa: E402
from sst_interp.model.generation import GenerationConfig  # noqa: E402
from sst_interp.model.loop_model import LoopModel, generate_looped  # noqa: E402
from sst_interp.model.testing import tiny_hrm_text  # noqa: E402
from tests.unit.interventions.feature_dictionary import write_dictionary  # noqa: E402
from tests.unit.interventions.test_interventions import IDS, recorded, sst_model, write_run  # noqa: E402
from tests.unit.interventions.test_live import STREAMS, assert_same, run_live  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

LAYER, WIDTH = 1, 48
SITE = Site("layer_out", layers=[LAYER], positions=[0, 1, 2], iterations=[1, 2, 3])
ONE = Site("layer_out", layers=[LAYER], positions=[1], iterations=[2])  # position 1, iteration 2: index [1, 1]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory):
    return write_dictionary(tmp_path_factory.mktemp("dict") / "d", 32, WIDTH, layer=LAYER, iterations=(1, 2, 3))


def _feature(folder, **options) -> Operation:
    return Operation("feature", dictionary=str(folder), **options)


def _hand_activations(folder, x: torch.Tensor) -> torch.Tensor:
    """ReLU(x W_enc + b_enc) from the saved weights, [B, width] float64."""
    weights = load_file(str(folder / "sae_weights.safetensors"))
    return torch.relu(x @ weights["W_enc"].double() + weights["b_enc"].double())


def _decoder(folder) -> torch.Tensor:
    return load_file(str(folder / "sae_weights.safetensors"))["W_dec"].double()


def test_the_sidecar_name_is_the_one_the_features_package_writes():
    assert feature_edits.SIDECAR == FEATURES_SIDECAR


def test_a_no_op_edit_is_the_clean_run_bit_for_bit(folder):
    sst = sst_model()
    clean_tokens, clean, _ = run_live(sst, InterventionSpec())
    everything = tuple(range(WIDTH))
    steer0 = InterventionSpec.of(SITE, _feature(folder, features=everything, mode="steer", scale=0.0))
    tokens, streams, iv = run_live(sst, steer0)
    assert tokens == clean_tokens and iv.site_report()[0]["sites"] > 0
    assert_same(streams, clean)
    # each row patched from itself: every feature takes the activation it has
    own = [InterventionSpec.of(SITE, _feature(folder, features=everything, mode="patch", source=row))
           for row in range(2)]
    tokens, streams, _ = run_live(sst, own)
    assert tokens == clean_tokens
    assert_same(streams, clean)


def _site_change(folder, operation: Operation, rows=(0, 1)):
    """(clean state at ONE [B, d], edited state there, clean captures, edited captures)."""
    sst = sst_model()
    _, clean, _ = run_live(sst, InterventionSpec(), streams=("layer_out",))
    _, edited, _ = run_live(sst, InterventionSpec.of(ONE, operation), streams=("layer_out",))
    return clean["layer_out"][:, 1, 1, LAYER], edited["layer_out"][:, 1, 1, LAYER], clean, edited


def test_an_ablation_moves_the_state_by_minus_a_f_times_its_direction(folder):
    sst_state = _site_change(folder, _feature(folder, features=[0], mode="steer", scale=0.0))[0]
    acts = _hand_activations(folder, sst_state)
    feature = int(acts[0].argmax())
    assert acts[0, feature] > 0.1
    x, edited, clean, after = _site_change(folder, _feature(folder, features=[feature], mode="ablate"))
    expected = -acts[:, feature, None] * _decoder(folder)[feature]
    torch.testing.assert_close(edited - x, expected, rtol=1e-5, atol=1e-6)
    # the sites before it are untouched; the next iteration reads the change
    assert torch.equal(after["layer_out"][:, 0].nan_to_num(7.0), clean["layer_out"][:, 0].nan_to_num(7.0))
    assert not torch.equal(after["layer_out"][:, 1, 2], clean["layer_out"][:, 1, 2])


def test_a_set_value_and_a_live_patch_move_the_state_by_the_change_of_activation(folder):
    x = _site_change(folder, _feature(folder, features=[0], mode="steer", scale=0.0))[0]
    acts = _hand_activations(folder, x)
    decoder = _decoder(folder)
    features = [3, 7]
    _, edited, _, _ = _site_change(folder, _feature(folder, features=features, mode="steer", value=2.5))
    expected = (2.5 - acts[:, features]) @ decoder[features]
    torch.testing.assert_close(edited - x, expected, rtol=1e-5, atol=1e-6)
    # row 0 takes row 1's activations; row 1 is patched from itself (unchanged)
    _, edited, _, _ = _site_change(folder, _feature(folder, features=features, mode="patch", source=1))
    expected = (acts[1, features] - acts[0, features]) @ decoder[features]
    torch.testing.assert_close(edited[0] - x[0], expected, rtol=1e-5, atol=1e-6)
    assert torch.equal(edited[1], x[1])


def test_a_feature_patch_from_a_recorded_run_equals_the_live_patch_of_the_same_states(folder, tmp_path):
    # float32: the Recorder stores float32, so a float32 model's recorded states are its live values exactly
    sst = sst_model(torch.float32)
    clean_tokens, clean = recorded(sst)
    write_run(tmp_path / "ref", sst, clean)
    features = (2, 5, 11)
    from_run = InterventionSpec.of(ONE, _feature(folder, features=features, mode="patch", run=str(tmp_path / "ref")))
    run_tokens, run_columns = recorded(sst, interventions=from_run, question_ids=[IDS[1], None])  # row 0 reads q1
    live = [InterventionSpec.of(ONE, _feature(folder, features=features, mode="patch", source=1)), InterventionSpec()]
    live_tokens, live_columns = recorded(sst, interventions=live)
    assert live_tokens == run_tokens
    assert torch.equal(live_columns["hidden"]["values"], run_columns["hidden"]["values"])
    assert not torch.equal(live_columns["hidden"]["values"], clean["hidden"]["values"])
    assert set(patch_runs(from_run)) == {str(folder.resolve()), str((tmp_path / "ref").resolve())}


def _looped(model, spec):
    with intervene_loop(model, spec) as intervener:
        result = generate_looped(model, [[2, 17, 40, 9, 33]], 2, GenerationConfig(max_new_tokens=3),
                                 observer=intervener)
    return result.token_ids[0]


def test_feature_edits_on_a_natively_looping_family(tmp_path):
    model = LoopModel(tiny_hrm_text(dtype=torch.float64))
    folder = write_dictionary(tmp_path / "d", int(model.hidden_size), WIDTH, layer=1, iterations=(1, 2))
    site = Site("layer_out", layers=[1], positions=[0, 1], iterations=[1, 2])
    clean = _looped(model, InterventionSpec())
    assert _looped(model, InterventionSpec.of(site, _feature(folder, features=list(range(WIDTH)), mode="steer",
                                                              scale=0.0))) == clean
    big = InterventionSpec.of(site, _feature(folder, features=list(range(WIDTH)), mode="steer", value=50.0))
    assert _looped(model, big) != clean


def test_the_spec_round_trips_through_json_and_yaml(folder, tmp_path):
    spec = InterventionSpec.of(ONE, _feature(folder, features=(17, 3), mode="patch", source=1, scale=0.5))
    assert spec.interventions[0].operation.features == (3, 17)
    assert InterventionSpec.from_dict(json.loads(spec.to_json())) == spec
    target = tmp_path / "spec.yaml"
    target.write_text(yaml.safe_dump(spec.to_dict()))
    assert InterventionSpec.from_file(target) == spec
    assert set(patch_runs(InterventionSpec.of(ONE, _feature(folder, features=[1], mode="ablate")))) == {
        str(folder.resolve())}
    assert "cannot run compiled" in spec_refusal(InterventionSpec.of(ONE, _feature(folder, features=[1],
                                                                                    mode="ablate")))


def test_each_dictionary_loads_once_per_intervener(folder, monkeypatch):
    loads = []
    real = feature_edits.FeatureDictionary.load
    monkeypatch.setattr(feature_edits.FeatureDictionary, "load", classmethod(
        lambda cls, path: loads.append(path) or real(path)))
    spec = InterventionSpec((*InterventionSpec.of(ONE, _feature(folder, features=[1], mode="ablate")).interventions,
                             *InterventionSpec.of(SITE, _feature(folder, features=[2], mode="steer")).interventions))
    run_live(sst_model(), spec, streams=("layer_out",))
    assert len(loads) == 1


@pytest.mark.parametrize("make, pattern", [
    (lambda f: Operation("feature", dictionary=str(f), features=[1]), "needs dictionary .* and mode"),
    (lambda f: Operation("feature", dictionary=str(f), features=[1], mode="erase"), "needs dictionary"),
    (lambda f: Operation("feature", dictionary=str(f), features=[], mode="ablate"), "one or more feature"),
    (lambda f: Operation("feature", dictionary=str(f), features=[1], mode="ablate", value=1.0), "under mode 'steer'"),
    (lambda f: Operation("feature", dictionary=str(f), features=[1], mode="steer", source=1), "belongs to mode"),
    (lambda f: Operation("feature", dictionary=str(f), features=[1], mode="patch"), "give exactly one"),
    (lambda f: Operation("feature", dictionary=str(f), features=[1], mode="patch", source=1, run="x"),
     "give exactly one"),
    (lambda f: Operation("feature", dictionary=str(f), features=[1], mode="steer", depth=2), "drop depth"),
    (lambda f: Operation("feature", dictionary=str(f), features=[1], mode="ablate", run="x"), "drop run"),
    (lambda f: Operation("zero", features=[1]), "belong to a 'feature' intervention"),
])
def test_a_bad_feature_operation_is_one_error_line(folder, make, pattern):
    with pytest.raises(UsageError, match=pattern) as err:
        make(folder)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("site, features, pattern", [
    (Site("layer_out", layers=[0], iterations=[1]), [1], "trained on layer 1"),
    (Site("layer_out", iterations=[1]), [1], "trained on layer 1"),
    (Site("layer_out", layers=[1], iterations=[4]), [1], "covers iterations"),
    (Site("layer_out", layers=[1]), [1], "covers iterations"),
    (Site("layer_out", layers=[1], iterations=[1]), [WIDTH], "do not exist"),
])
def test_a_dictionary_that_does_not_fit_the_site_is_one_error_line(folder, site, features, pattern):
    with pytest.raises(UsageError, match=pattern) as err:
        run_live(sst_model(), InterventionSpec.of(site, _feature(folder, features=features, mode="ablate")))
    assert "\n" not in str(err.value)


def test_a_dictionary_of_another_width_or_no_dictionary_is_one_error_line(tmp_path):
    narrow = write_dictionary(tmp_path / "narrow", 16, 8, layer=LAYER, iterations=(1,))
    for folder, pattern in ((narrow, "width d = 16"), (tmp_path / "none", "holds no dictionary")):
        with pytest.raises(UsageError, match=pattern) as err:
            run_live(sst_model(), InterventionSpec.of(Site("layer_out", layers=[LAYER], iterations=[1]),
                                                      _feature(folder, features=[0], mode="ablate")))
        assert "\n" not in str(err.value)
