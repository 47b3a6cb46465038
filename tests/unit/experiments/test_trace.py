"""Experiment b (causal tracing across depths) on a planted model: it finds the one causal path and nothing else.

The planted model: a tiny float32 Gemma 3 whose attention output projections are all zero (no position reads
another through attention) and whose only state stream is in layer ``STAR``. So the one way information passes
from position p to a later position is layer STAR's carried state, and depth k differs from depth 1 only through
that layer. Below STAR, depth k's states equal depth 1's bit for bit (same token, no stream); above STAR they
differ but reach no later position. Hence, for a target at position T:

- patching (STAR, p) for every p <= T changes the target's log-prob;
- at p = T itself, every layer >= STAR does (it sits on the residual path to the logits), and patching the last
  layer there gives exactly the total effect (the logits are then depth k's);
- every other (layer, position) has an indirect effect of exactly 0;
- at position 0, iteration i < k of depth k changes the target only in layer STAR for i > 1 (iteration 1 of
  depth k is depth 1's own pass), never below it.

The prompt is processed token by token (``sequential``), so position 0's passes are single-column passes like
the iterations after them (a multi-column prompt pass rounds differently and would leak 1e-7 effects).
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from sst_interp.data import load_questions
from sst_interp.kernels.errors import UsageError
from sst_interp.experiments.manifest import kinds_in, read_manifest, read_table
from sst_interp.experiments.setup import Setup
from sst_interp.experiments.trace import TraceConfig, run_trace
from sst_interp.model import SSTConfig, SSTModel
from sst_interp.model.testing import char_tokenizer, tiny_gemma3
from sst_interp.record.options import RecordOptions

pytestmark = pytest.mark.usefixtures("one_thread")

LAYERS = 4
STAR = 1
DEPTH = 3


def planted_setup(questions: int = 8) -> Setup:
    backbone = tiny_gemma3(num_layers=LAYERS, dtype=torch.float32, seed=0)
    with torch.no_grad():
        for layer in backbone.model.layers:
            layer.self_attn.o_proj.weight.zero_()
    sst = SSTModel.from_backbone(backbone, SSTConfig(state_scale="hidden", layers=[STAR]))
    base = RecordOptions(questions="demo", max_new_tokens=6, batch_size=1, full_positions=6, sketch_positions=0,
                      top_k=8, device="cpu", prompt_mode="sequential", dtype="float32")
    return Setup(sst, char_tokenizer(), load_questions("demo", None)[:questions], base, {"model": "planted"}, "0")


# the first differing token, or depth k's token at a fixed position (for questions whose tokens agree before it)
@pytest.mark.parametrize("fixed", [None, 3])
def test_trace_finds_the_planted_path_and_nothing_else(tmp_path, fixed):
    # the fixed target needs no more than 5 questions to have more than 2 measured (the first-difference case, 8)
    tables = run_trace(planted_setup(8 if fixed is None else 5), tmp_path,
                       TraceConfig(depth=DEPTH, positions=6, target_position=fixed))
    targets = tables["trace_targets"]
    measured = targets[targets["skipped"] == ""].set_index("question_id")
    assert len(measured) >= 1 and (measured["target_position"] >= 1).any(), targets
    if fixed is not None:  # more questions than those whose tokens differ
        assert (measured["target_position"] == fixed).all() and len(measured) > 2
    effects = tables["trace_effects"]
    for question, target in measured.iterrows():
        mine = effects[effects["question_id"] == question]
        t = int(target["target_position"])
        grid = mine[mine["map"] == "layer_position"]
        assert len(grid) == LAYERS * (t + 1)  # every layer at every position up to the target, none after
        for row in grid.itertuples():
            planted = (row.layer == STAR and row.position <= t) or (row.layer >= STAR and row.position == t)
            if planted:
                assert row.indirect_effect != 0.0, row
            else:
                assert row.indirect_effect == 0.0, row
        last = grid[(grid["layer"] == LAYERS - 1) & (grid["position"] == t)]["indirect_effect"].item()
        assert last == pytest.approx(target["total_effect"], abs=1e-12)
        by_iteration = mine[mine["map"] == "layer_iteration"]
        for row in by_iteration.itertuples():
            if row.layer == STAR and row.iteration > 1:
                assert row.indirect_effect != 0.0, row
            elif row.layer < STAR or row.iteration == 1 or t > 0:
                assert row.indirect_effect == 0.0, row
    # the control: patched with another question's depth-k state, layer 0 (below the stream, so equal at every depth
    # of one question and never an effect when patched by depth) moves the target: corruption by resampled states
    # finds what is question-specific, corruption by depth what depth adds
    resampled = effects[effects["map"] == "layer_position_resampled"]
    assert len(resampled) == len(effects[effects["map"] == "layer_position"])
    below = resampled[(resampled["layer"] == 0)]
    assert (below["indirect_effect"] != 0.0).any()
    aligned = tables["trace_layer_offset_resampled"].set_index(["layer", "offset"])
    assert aligned.loc[(0, 0), "n_questions"] == len(measured)
    depth_aligned = tables["trace_layer_offset"].set_index(["layer", "offset"])
    assert depth_aligned.loc[(0, 0), "indirect_effect_mean"] == 0.0
    assert depth_aligned.loc[(LAYERS - 1, 0), "indirect_effect_mean"] == pytest.approx(
        depth_aligned.loc[(LAYERS - 1, 0), "total_effect_mean"], abs=1e-12)
    # the heatmap table is the per-question table's mean, and the files are what the manifest pins
    cells = tables["trace_layer_position"].set_index(["layer", "position"])
    star = effects[(effects["map"] == "layer_position") & (effects["layer"] == STAR) & (effects["position"] == 0)]
    assert cells.loc[(STAR, 0), "indirect_effect_mean"] == pytest.approx(star["indirect_effect"].mean())
    assert cells.loc[(STAR, 0), "n_questions"] == len(measured)
    assert kinds_in(tmp_path) == ["trace"]
    assert read_manifest(tmp_path, "trace")["conditions"]["clean"]["depths"] == [1, DEPTH]
    pd.testing.assert_frame_equal(read_table(tmp_path, "trace", "trace_layer_position"),
                                  tables["trace_layer_position"])


def test_trace_refuses_positions_beyond_the_recorded_ones(tmp_path):
    with pytest.raises(UsageError, match="--full-positions"):
        run_trace(planted_setup(1), tmp_path / "out", TraceConfig(depth=DEPTH, positions=7))
    assert not (tmp_path / "out").exists()
