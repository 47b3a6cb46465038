"""The ``map`` operation: a Python function of the stream's value at a site (what a dictionary's reconstruction is
spliced in with). The identity changes nothing, bit for bit, on an SST and on a natively looping family; a function
that returns zeros is exactly the ``zero`` operation; and what cannot run a function (a recording's spec file, the
compiled step) or a function that is missing or of the wrong shape is one UsageError line."""

from __future__ import annotations

import pytest
import torch

from sst_interp.interventions import InterventionSpec, Operation, Site
from sst_interp.interventions.checks import patch_runs
from sst_interp.interventions.compiled import spec_refusal
from sst_interp.interventions.loops import intervene_loop
from sst_interp.kernels.errors import UsageError
from sst_interp.model.generation import GenerationConfig
from sst_interp.model.loop_model import LoopModel, generate_looped
from sst_interp.model.observers import ObserverGroup
from sst_interp.model.testing import tiny_hrm_text
from tests.unit.interventions.test_interventions import sst_model
from tests.unit.interventions.test_live import assert_same, run_live
from tests.unit.observers import KeptLogits

pytestmark = pytest.mark.usefixtures("one_thread")

EVERY = Site("layer_out")
IDENTITY = {"f": lambda values: values.clone()}
ZEROS = {"f": torch.zeros_like}


def _live(sst, spec, functions):
    with sst.intervene(spec, capture=("layer_out", "logits"), functions=functions) as iv:
        result = iv.generate([[2, 17, 40, 9], [5, 3, 8, 1]], 2, GenerationConfig(max_new_tokens=4,
                                                                                  prompt_mode="two_pass"))
    return result.token_ids, {name: iv.captured(name) for name in ("layer_out", "logits")}, iv


def test_an_identity_map_everywhere_is_the_clean_sst_run_and_a_zero_map_is_zero():
    sst = sst_model()
    clean_tokens, clean, _ = _live(sst, InterventionSpec(), {})
    tokens, mapped, iv = _live(sst, InterventionSpec.of(EVERY, Operation("map", function="f")), IDENTITY)
    assert tokens == clean_tokens
    assert_same(mapped, clean)
    assert iv.site_report()[0]["sites"] > 0
    site = Site("layer_out", layers=[1], positions=[0, 1], iterations=[2])
    zero_tokens, zeroed, _ = _live(sst, InterventionSpec.of(site, Operation("zero")), {})
    map_tokens, mapped, _ = _live(sst, InterventionSpec.of(site, Operation("map", function="f")), ZEROS)
    assert map_tokens == zero_tokens
    assert_same(mapped, zeroed)
    assert not torch.equal(zeroed["layer_out"].nan_to_num(7.0), clean["layer_out"].nan_to_num(7.0))


def _looped(model: LoopModel, spec: InterventionSpec, functions) -> tuple[list[int], torch.Tensor]:
    logits = KeptLogits()
    with intervene_loop(model, spec, functions=functions) as intervener:
        result = generate_looped(model, [[2, 17, 40, 9, 33]], 2, GenerationConfig(max_new_tokens=4),
                                 observer=ObserverGroup(intervener, logits))
    return result.token_ids[0], torch.stack(logits.logits)


def test_an_identity_map_is_the_clean_looped_run_and_a_zero_map_is_zero():
    model = LoopModel(tiny_hrm_text(dtype=torch.float64))
    clean = _looped(model, InterventionSpec(), {})
    mapped = _looped(model, InterventionSpec.of(EVERY, Operation("map", function="f")), IDENTITY)
    assert mapped[0] == clean[0] and torch.equal(mapped[1], clean[1])
    site = Site("layer_out", layers=[1], positions=[0], iterations=[1])
    zeroed = _looped(model, InterventionSpec.of(site, Operation("zero")), {})
    by_map = _looped(model, InterventionSpec.of(site, Operation("map", function="f")), ZEROS)
    assert by_map[0] == zeroed[0] and torch.equal(by_map[1], zeroed[1])
    assert not torch.equal(zeroed[1], clean[1])


def test_a_map_round_trips_through_json_with_its_function_name():
    spec = InterventionSpec.of(Site("layer_out", iterations=[2]), Operation("map", function="reconstruct"))
    assert InterventionSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize("make, pattern", [
    (lambda: Operation("map"), "a 'map' intervention names its Python function"),
    (lambda: Operation("zero", function="f"), "function='f' belongs to a 'map' intervention"),
    (lambda: InterventionSpec.of(Site("alpha"), Operation("map", function="f")), "applies to the stream(s)"),
])
def test_a_map_without_a_name_or_a_name_elsewhere_is_refused(make, pattern):
    with pytest.raises(UsageError, match=pattern.replace("(", r"\(").replace(")", r"\)")):
        make()


def test_what_cannot_run_a_function_refuses_a_map_in_one_line():
    spec = InterventionSpec.of(EVERY, Operation("map", function="f"))
    with pytest.raises(UsageError, match="a recording cannot take from a spec file"):
        patch_runs(spec)
    assert "cannot run compiled; use --compile off" in spec_refusal(spec)
    sst = sst_model()
    with pytest.raises(UsageError, match=r"names the function 'f', which was not handed over"):
        _live(sst, spec, {})
    with pytest.raises(UsageError, match=r"must keep the shape \[B, d\]"):
        _live(sst, spec, {"f": lambda values: values[:, :3]})
    assert sst.context.intervention is None  # removed on error too
