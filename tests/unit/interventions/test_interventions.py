"""Interventions on the state stream: exactness (no-op, alpha 0, patching a run with its own states, nothing before
the intervened iteration changes), freeze and add doing what they say, and bad specs as one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from sst_interp.kernels.errors import UsageError
from sst_interp.hooks import RecordConfig, Recorder
from sst_interp.interventions import Intervention, InterventionSpec, Operation, Site, intervene
from sst_interp.model import GenerationConfig, SSTConfig, SSTModel, generate
from sst_interp.model.observers import ObserverGroup
from sst_interp.model.testing import tiny_gemma3
from sst_interp.store import Run, RunWriter

# Equal lengths: transformers' float64 attention turns left padding into NaNs (its own generate does too)
PROMPTS = [[2, 5, 6, 7, 8, 9], [2, 11, 12, 13, 14, 15]]
IDS = ["q0", "q1"]
CONFIG = GenerationConfig(max_new_tokens=6, logits_every_iteration=True)
FULL = 6  # every generated position recorded in full
DEPTH = 3


def sst_model(dtype: torch.dtype = torch.float64, **config) -> SSTModel:
    return SSTModel.from_backbone(tiny_gemma3(dtype=dtype, seed=1), SSTConfig(state_scale="hidden", **config))


def spec(*items: tuple[Site, Operation]) -> InterventionSpec:
    return InterventionSpec(tuple(Intervention(site, op) for site, op in items))


def recorded(sst: SSTModel, depth: int = DEPTH, interventions: InterventionSpec | None = None,
             question_ids: list[str] | None = None, config: GenerationConfig = CONFIG):
    """(tokens, hidden [B rows of (position, iteration, layer) -> d], logits argmax) of one generation."""
    capture = RecordConfig(full_positions=FULL, sketch_positions=0, top_k=4,
                           dtype="float32" if sst.dtype != torch.float64 else "float32")
    with Recorder.for_model(sst, IDS, capture) as recorder:
        if interventions is None:
            result = generate(sst, PROMPTS, depth, config, observer=recorder)
        else:
            with intervene(sst, interventions, question_ids) as intervener:
                result = generate(sst, PROMPTS, depth, config, observer=ObserverGroup(intervener, recorder))
    columns = recorder.columns()
    return result.token_ids, columns


def hidden_by_site(columns) -> dict[tuple[str, int, int, int], np.ndarray]:
    hidden = columns["hidden"]
    values = hidden["values"].double().numpy()
    keys = zip(hidden["question_id"], hidden["position"], hidden["iteration"], hidden["layer"])
    return {(q, int(p), int(i), int(l)): values[n] for n, (q, p, i, l) in enumerate(keys)}


def write_run(path, sst: SSTModel, columns) -> None:
    """A run directory holding one recorded batch at DEPTH (what ``record`` writes, without the tables)."""
    extra = {"hidden_size": sst.hidden_size, "num_layers": sst.num_layers, "dtype": "float32", "top_k": 4,
             "full_positions": FULL, "sketch_positions": 0, "protocol": "completion", "prompt_mode": "two_pass",
             "depths": [DEPTH]}
    with RunWriter.create_or_resume(path, {"test": "patch"}, extra) as writer:
        writer.submit(DEPTH, IDS, **columns)


def test_an_empty_spec_equals_the_clean_run_bit_for_bit():
    sst = sst_model()
    clean_tokens, clean = recorded(sst)
    tokens, columns = recorded(sst, interventions=InterventionSpec())
    assert tokens == clean_tokens
    for name in ("values",):
        assert torch.equal(columns["hidden"][name], clean["hidden"][name])
    assert torch.equal(columns["logits"]["top_logprobs"], clean["logits"]["top_logprobs"])


def test_alpha_zero_everywhere_equals_the_plain_backbone():
    # under the prompt mode none, whose prompt pass reads no state (under two_pass and sequential the prompt passes
    # read the stream and no site reaches them: test_identities.py)
    none = GenerationConfig(max_new_tokens=6, logits_every_iteration=True, prompt_mode="none")
    sst = sst_model(torch.float32)
    plain = SSTModel.from_backbone(tiny_gemma3(dtype=torch.float32, seed=1), SSTConfig(layers=[]))
    plain_tokens, plain_columns = recorded(plain, depth=1, config=none)
    alpha_zero = spec((Site("alpha"), Operation("set_alpha", value=0.0)))
    tokens, columns = recorded(sst, depth=1, interventions=alpha_zero, config=none)
    assert tokens == plain_tokens
    assert torch.equal(columns["hidden"]["values"], plain_columns["hidden"]["values"])
    # Deeper, every iteration repeats the plain pass. Not bit for bit: iterations 2..k re-run the last prompt token
    # alone, and a one-column pass rounds differently from the prompt pass (about 1e-6 in float32).
    tokens, columns = recorded(sst, depth=3, interventions=alpha_zero, config=none)
    assert tokens == plain_tokens
    got = hidden_by_site(columns)
    for (q, p, _, layer), value in hidden_by_site(plain_columns).items():
        for iteration in (1, 2, 3):
            np.testing.assert_allclose(got[(q, p, iteration, layer)], value, rtol=0, atol=1e-5)


def test_an_intervention_never_changes_earlier_iterations_or_positions():
    sst = sst_model()
    _, clean = recorded(sst)
    site = Site("layer_out", positions=[2], iterations=[2])
    _, columns = recorded(sst, interventions=spec((site, Operation("zero"))))
    before, after = hidden_by_site(clean), hidden_by_site(columns)
    changed_later = False
    for key, value in before.items():
        _, position, iteration, _ = key
        if position < 2 or (position == 2 and iteration < 2):
            np.testing.assert_array_equal(after[key], value)
        elif position == 2 and iteration == 2:
            assert not after[key].any()  # the layer's output was zeroed
        else:
            changed_later |= not np.array_equal(after[key], value)
    assert changed_later  # the zeroed state reached the passes after it


def test_freeze_makes_the_next_iteration_repeat_the_frozen_one():
    sst = sst_model()
    _, columns = recorded(sst, interventions=spec((Site("layer_out", iterations=[2]), Operation("freeze"))))
    _, clean = recorded(sst)
    got, reference = hidden_by_site(columns), hidden_by_site(clean)
    for (q, p, i, layer), value in got.items():
        if i == 3:  # it reads the state iteration 2 read, at the same position: the same pass again
            np.testing.assert_array_equal(value, got[(q, p, 2, layer)])
        if i < 3 and p == 0:
            np.testing.assert_array_equal(value, reference[(q, p, i, layer)])
    assert any(not np.array_equal(got[k], reference[k]) for k in got if k[2] == 3)


def test_add_moves_the_chosen_output_by_scale_times_direction():
    sst = sst_model()
    direction = np.linspace(-1.0, 1.0, sst.hidden_size)
    site = Site("layer_out", layers=[1], positions=[0], iterations=[1])
    _, clean = recorded(sst)
    _, columns = recorded(sst, interventions=spec((site, Operation("add", scale=0.5, direction=tuple(direction)))))
    got, reference = hidden_by_site(columns), hidden_by_site(clean)
    for q in IDS:
        np.testing.assert_allclose(got[(q, 0, 1, 1)], reference[(q, 0, 1, 1)] + 0.5 * direction, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(got[(q, 0, 1, 0)], reference[(q, 0, 1, 0)])


def test_patching_a_run_with_its_own_recorded_float32_states_equals_the_clean_run(tmp_path):
    sst = sst_model(torch.float32)
    clean_tokens, clean = recorded(sst)
    write_run(tmp_path / "run", sst, clean)
    patch = spec((Site("layer_out", positions=list(range(FULL))),
                  Operation("patch", run=str(tmp_path / "run"))))
    tokens, columns = recorded(sst, interventions=patch, question_ids=IDS)
    assert tokens == clean_tokens
    assert torch.equal(columns["hidden"]["values"], clean["hidden"]["values"])
    assert Run.open(tmp_path / "run").depths == [DEPTH]


def test_a_spec_round_trips_through_json_and_yaml(tmp_path):
    original = spec((Site("state_in", layers=[0, 2], positions="all"), Operation("zero")),
                    (Site("alpha", iterations=[2, 3]), Operation("set_alpha", value=0.0)))
    (tmp_path / "s.json").write_text(original.to_json())
    import yaml

    (tmp_path / "s.yaml").write_text(yaml.safe_dump(original.to_dict()))
    assert InterventionSpec.from_file(tmp_path / "s.json") == original
    assert InterventionSpec.from_file(tmp_path / "s.yaml") == original
    assert json.loads(original.to_json())["interventions"][0]["site"] == {"layers": [0, 2], "stream": "state_in"}


@pytest.mark.parametrize("build, message", [
    (lambda: Site("residual"), "unknown intervention stream 'residual'"),
    (lambda: Site("layer_out", iterations=[0]), "iterations are 1-based"),
    (lambda: Operation("scramble"), "unknown intervention operation 'scramble'"),
    (lambda: Operation("add"), "needs exactly one of direction"),
    (lambda: Intervention(Site("alpha"), Operation("zero")), "applies to the stream(s) state_in, blended, layer_out"),
    (lambda: InterventionSpec.from_dict({"interventions": [{"site": {"stream": "alpha", "layer": 1},
                                                           "operation": {"kind": "zero"}}]}),
     "unknown site keys ['layer']"),
])
def test_bad_specs_are_one_line_usage_errors(build, message):
    with pytest.raises(UsageError) as info:
        build()
    assert message in str(info.value) and "\n" not in str(info.value)


def test_specs_that_do_not_fit_the_model_or_run_are_refused(tmp_path):
    sst = sst_model()
    with pytest.raises(UsageError, match=r"layers \[7\] do not exist in a model with 3 layers"):
        with intervene(sst, spec((Site("layer_out", layers=[7]), Operation("zero")))):
            pass
    with pytest.raises(UsageError, match="this model's states have d = 32"):
        with intervene(sst, spec((Site("layer_out"), Operation("add", direction=(1.0, 2.0))))):
            pass
    assert sst.context.intervention is None  # refused before anything was installed
    _, clean = recorded(sst)
    write_run(tmp_path / "run", sst, clean)
    beyond = spec((Site("layer_out", positions=[0]), Operation("patch", run=str(tmp_path / "run"), depth=2)))
    with pytest.raises(UsageError, match="has no depth 2"):
        with intervene(sst, beyond, IDS) as intervener:
            generate(sst, PROMPTS, DEPTH, CONFIG, observer=intervener)
    assert sst.context.intervention is None  # removed on error too
