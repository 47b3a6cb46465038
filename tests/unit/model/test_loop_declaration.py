"""What a depth sets is derived from the declared ``depth_key`` (issue 45 item 5): the two cannot drift apart."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sst_interp.model.loop_declaration import LoopDeclaration
from sst_interp.model.loops import LOOPS, SST_LOOP
from sst_interp.model.looped_block import looped_block

#: Enough of a config for every family's depth fields (HRM-Text sizes its KV slots from its stacks).
CONFIG = SimpleNamespace(num_layers_per_stack=2, L_cycles=2, num_hidden_layers=6)


@pytest.mark.parametrize("loop", [loop for loop in LOOPS if loop is not SST_LOOP], ids=lambda loop: loop.family)
def test_a_depth_sets_the_declared_depth_key(loop):
    for depth in (1, 3):
        fields = loop.depth_fields(CONFIG, depth)
        assert fields[loop.depth_key] == depth


def test_hrm_text_also_sizes_its_kv_slots_from_the_depth():
    hrm = next(loop for loop in LOOPS if loop.family == "hrm_text")
    assert hrm.depth_fields(CONFIG, 3) == {"H_cycles": 3, "num_hidden_layers": 2 * 3 * 3}


def test_a_looped_block_sets_its_depth_key_only():
    loop = looped_block(family="toy", layers=lambda c: ["a", "b"], looped=lambda c: (0, 1), depth_key="passes",
                        head="head")
    assert loop.depth_fields(CONFIG, 4) == {"passes": 4}


def test_sst_sets_no_field_and_a_follower_cannot_set_the_depth_itself():
    with pytest.raises(ValueError, match="reruns"):
        SST_LOOP.depth_fields(CONFIG, 2)
    bad = LoopDeclaration(family="bad", model_types=(), carries="", depth_meaning="", depth_key="passes",
                          max_depth=None, exits="", lens="", layer_names=lambda c: [], visits=lambda c, d: [],
                          depth_follows=lambda config, depth: {"passes": depth + 1})
    with pytest.raises(ValueError, match="depth itself"):
        bad.depth_fields(CONFIG, 2)
