"""SST through the family declaration: :data:`SST_LOOP` states the addresses the SST recorder writes (every layer
once per iteration, in that order), with the recorded bytes unchanged (the recorder is not touched; this pins that the
declaration describes it)."""

from __future__ import annotations

import pytest
import torch

from sst_interp.hooks import RecordConfig, Recorder
from sst_interp.model import GenerationConfig, SSTConfig, SSTModel, generate
from sst_interp.model.loops import SST_LOOP, loop_for_model_type
from sst_interp.model.testing import tiny_gemma3, tiny_llama

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("builder", [tiny_gemma3, tiny_llama])
@pytest.mark.parametrize("depth", [1, 3])
def test_family_sst_declaration_is_what_the_sst_recorder_writes(builder, depth: int) -> None:
    sst = SSTModel.from_backbone(builder(dtype=torch.float32), SSTConfig(state_scale="hidden"))
    assert sst.loop is SST_LOOP and loop_for_model_type(sst.backbone.config.model_type) is SST_LOOP
    config = RecordConfig(full_positions=2, sketch_positions=0, top_k=4)
    with Recorder.for_model(sst, ["q"], config) as recorder:
        generate(sst, [[2, 40, 41]], depth=depth, config=GenerationConfig(max_new_tokens=2,
                                                                          logits_every_iteration=True),
                 observer=recorder)
    hidden = recorder.columns()["hidden"]
    for position in (0, 1):
        rows = hidden["position"] == position
        order = list(zip(hidden["iteration"][rows].tolist(), hidden["layer"][rows].tolist()))
        assert order == SST_LOOP.visits(sst.backbone.config, depth)
    assert SST_LOOP.iterations_per_layer(sst.backbone.config, depth) == [depth] * sst.num_layers
    assert SST_LOOP.depth_key is None  # iterations are reruns of the emitting pass, not a config field
