"""The identities docs/interventions.md states, each in the prompt modes and dtypes it holds in (issue 30, defects
1-3): freeze over every layer makes depth k equal depth 1 in every prompt mode; set_alpha at (position 0,
iteration 1) changes only the last column of the two-pass prompt pass; set_alpha 0 everywhere is the plain backbone
under the prompt mode none (bit for bit at depth 1, in float32 and float64) and is not under two_pass or sequential,
whose prompt passes read the stream and are never changed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sst_interp.interventions import Intervention, InterventionSpec, Operation, Site, intervene
from sst_interp.model import GenerationConfig, SSTConfig, SSTModel, generate
from sst_interp.model.testing import tiny_gemma3

PROMPTS = [[2, 5, 6, 7, 8, 9], [2, 11, 12, 13, 14, 15]]
MODES = ("none", "two_pass", "sequential")
DEPTH = 3

pytestmark = pytest.mark.usefixtures("one_thread")


def sst_model(dtype: torch.dtype = torch.float64, layers=None) -> SSTModel:
    config = SSTConfig(state_scale="hidden") if layers is None else SSTConfig(state_scale="hidden", layers=layers)
    return SSTModel.from_backbone(tiny_gemma3(dtype=dtype, seed=1), config)


def outputs(sst: SSTModel, depth: int, mode: str, spec: InterventionSpec | None = None) -> dict:
    """{(position, iteration, layer): [B, d] float64} of every pass that emits a token (its last column), and
    'tokens'."""
    config = GenerationConfig(max_new_tokens=5, prompt_mode=mode)
    seen: dict = {}
    where = {"coords": None}

    class Coordinates:
        def on_pass_start(self, info):
            where["coords"] = None if info.position is None else (info.position, info.iteration)

        def on_pass_end(self, info, logits):
            where["coords"] = None

        def on_token(self, position, token_ids, active):
            pass

    def hook(index):
        def save(module, inputs, output):
            if where["coords"] is not None:
                seen[(*where["coords"], index)] = output[:, -1].detach().double().clone()
        return save

    handles = [layer.register_forward_hook(hook(i)) for i, layer in enumerate(sst.layers)]
    try:
        observer = Coordinates()
        if spec is None:
            result = generate(sst, PROMPTS, depth, config, observer=observer)
        else:
            from sst_interp.model.observers import ObserverGroup

            with intervene(sst, spec) as intervener:
                result = generate(sst, PROMPTS, depth, config, observer=ObserverGroup(intervener, observer))
    finally:
        for handle in handles:
            handle.remove()
    seen["tokens"] = result.token_ids
    return seen


def final(states: dict, depth: int) -> dict:
    """{(position, layer): the last iteration's output}."""
    return {(p, layer): v for key, v in states.items() if key != "tokens" for p, i, layer in [key] if i == depth}


def largest_difference(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.mark.parametrize("mode", MODES)
def test_freeze_over_every_layer_makes_depth_k_equal_depth_1_in_every_prompt_mode(mode):
    sst = sst_model()
    freeze = InterventionSpec((Intervention(Site("layer_out", iterations=list(range(1, DEPTH))), Operation("freeze")),))
    shallow = final(outputs(sst, 1, mode), 1)
    frozen = outputs(sst, DEPTH, mode, freeze)
    clean = outputs(sst, DEPTH, mode)
    assert largest_difference(final(clean, DEPTH), shallow) > 1e-3  # depth matters here, so the test can fail
    assert frozen["tokens"] == outputs(sst, 1, mode)["tokens"]
    # sequential: position 0 is a one-column pass, so every iteration repeats it bit for bit; two_pass and none:
    # iterations 2..k re-run one column of a many-column prompt pass, which rounds differently (float64 here)
    tolerance = 0.0 if mode == "sequential" else 1e-12
    assert largest_difference(final(frozen, DEPTH), shallow) <= tolerance


@pytest.mark.parametrize("mode", MODES)
def test_freeze_at_position_0_iteration_1_makes_iteration_2_repeat_it(mode):
    sst = sst_model()
    spec = InterventionSpec((Intervention(Site("layer_out", positions=[0], iterations=[1]), Operation("freeze")),))
    frozen = outputs(sst, 2, mode, spec)
    for layer in range(sst.num_layers):
        np.testing.assert_allclose(frozen[(0, 2, layer)].numpy(), frozen[(0, 1, layer)].numpy(), rtol=0,
                                   atol=0.0 if mode == "sequential" else 1e-12)


def prompt_pass_outputs(sst: SSTModel, spec: InterventionSpec | None) -> list[list[torch.Tensor]]:
    """Per layer, the outputs [B, T, d] of every many-column pass (the two-pass prompt passes 1 and 2)."""
    config = GenerationConfig(max_new_tokens=2, prompt_mode="two_pass")
    seen: list[list[torch.Tensor]] = [[] for _ in sst.layers]

    def hook(index):
        def save(module, inputs, output):
            if output.shape[1] > 1:
                seen[index].append(output.detach().clone())
        return save

    handles = [layer.register_forward_hook(hook(i)) for i, layer in enumerate(sst.layers)]
    try:
        if spec is None:
            generate(sst, PROMPTS, 2, config)
        else:
            with intervene(sst, spec) as intervener:
                generate(sst, PROMPTS, 2, config, observer=intervener)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def test_set_alpha_at_position_0_iteration_1_changes_only_the_last_prompt_column_under_two_pass():
    sst = sst_model()
    spec = InterventionSpec((Intervention(Site("alpha", positions=[0], iterations=[1]),
                                          Operation("set_alpha", value=0.0)),))
    clean, changed = prompt_pass_outputs(sst, None), prompt_pass_outputs(sst, spec)
    last_column_moved = False
    for layer in range(sst.num_layers):
        assert len(clean[layer]) == len(changed[layer]) == 2  # pass 1 (no blend) and pass 2
        torch.testing.assert_close(changed[layer][0], clean[layer][0], rtol=0, atol=0)
        torch.testing.assert_close(changed[layer][1][:, :-1], clean[layer][1][:, :-1], rtol=0, atol=0)
        last_column_moved |= bool((changed[layer][1][:, -1] - clean[layer][1][:, -1]).abs().max() > 1e-3)
    assert last_column_moved


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_set_alpha_0_everywhere_is_the_backbone_under_prompt_mode_none(dtype):
    sst = sst_model(dtype)
    plain = SSTModel.from_backbone(tiny_gemma3(dtype=dtype, seed=1), SSTConfig(layers=[]))
    alpha_zero = InterventionSpec((Intervention(Site("alpha"), Operation("set_alpha", value=0.0)),))
    reference = final(outputs(plain, 1, "none"), 1)
    got = outputs(sst, 1, "none", alpha_zero)
    assert largest_difference(final(got, 1), reference) == 0.0  # bit for bit at depth 1
    # deeper: iterations 2..k re-run the last prompt token alone, which rounds differently from the prompt pass
    deep = outputs(sst, DEPTH, "none", alpha_zero)
    assert largest_difference(final(deep, DEPTH), reference) <= (1e-5 if dtype == torch.float32 else 1e-12)


@pytest.mark.parametrize("mode", ["two_pass", "sequential"])
def test_set_alpha_0_everywhere_is_not_the_backbone_where_the_prompt_reads_the_stream(mode):
    sst = sst_model()
    plain = SSTModel.from_backbone(tiny_gemma3(dtype=torch.float64, seed=1), SSTConfig(layers=[]))
    alpha_zero = InterventionSpec((Intervention(Site("alpha"), Operation("set_alpha", value=0.0)),))
    reference = final(outputs(plain, 1, mode), 1)
    assert largest_difference(final(outputs(sst, 1, mode, alpha_zero), 1), reference) > 1e-3
