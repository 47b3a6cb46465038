"""The CPU compilation's recipe (issue 35, item 7): frozen weights, GEMM autotuning on large models, and what guards it.

The freezing's correctness is the whole compiled-step suite's business (``test_compiled_step.py`` and
``test_compiled_interventions.py`` run under it: with the buffers statically marked on the CPU, 15 of the former's 24
tests failed, the frozen graph keeping the values the host filled in before compiling). Here: the choice of recipe,
the refusal once the frozen weights change, and one decode through the autotuned recipe that large models get.
"""

from __future__ import annotations

import pytest
import torch

from sst_interp.model import GenerationConfig, SSTConfig, SSTModel, generate
from sst_interp.model import compile_recipe
from sst_interp.model.compile_recipe import cpu_options
from sst_interp.model.compiled import StepCompiler, generate_compiled
from sst_interp.model.static_address import mark_static
from sst_interp.model.testing import tiny_gemma3
from tests.unit.model.conftest import make_sst
from tests.unit.observers import KeptLogits

pytestmark = pytest.mark.slow

PROMPTS = [[5, 6, 7, 8, 9, 10], [3, 4, 12]]
CONFIG = GenerationConfig(max_new_tokens=4, prompt_mode="none", logits_every_iteration=True)


def tiny_sst(num_layers: int) -> SSTModel:
    return SSTModel.from_backbone(tiny_gemma3(num_layers=num_layers, dtype=torch.float32),
                                  SSTConfig(state_scale="hidden"))


def eager_and_compiled(sst, compiler, depth=2):
    eager_log, compiled_log = KeptLogits(), KeptLogits()
    eager = generate(sst, PROMPTS, depth, CONFIG, observer=eager_log)
    fast = generate_compiled(sst, PROMPTS, depth, CONFIG, observer=compiled_log, compiler=compiler)
    worst = max((a - b).abs().max().item() for a, b in zip(eager_log.batches, compiled_log.batches))
    return eager.token_ids, fast.token_ids, worst


def test_cpu_tensors_are_not_marked_static():
    """A static mark on a CPU buffer would let the freezing fold it into the graph as a constant."""
    tensor = mark_static(torch.zeros(3))
    assert not hasattr(tensor, "_dynamo_static_input_type")


def test_small_models_freeze_without_autotuning_and_large_ones_autotune(monkeypatch):
    sst = make_sst("gemma3", dtype=torch.float32)
    assert cpu_options(sst) == {"freezing": True}
    assert StepCompiler(sst, "default").recipe == "default+frozen"
    assert StepCompiler(sst, None).recipe == "None"
    monkeypatch.setattr(compile_recipe, "GEMM_AUTOTUNE_MIN_PARAMETERS", 1)
    assert cpu_options(sst) == {"freezing": True, **compile_recipe.CPU_GEMM_AUTOTUNE}
    assert compile_recipe.CPU_GEMM_AUTOTUNE["max_autotune"]
    assert StepCompiler(sst, "default").recipe == "default+frozen+gemm-autotune"


def test_a_frozen_step_refuses_weights_changed_after_compilation():
    """Edited in place, then replaced: each time the compiler that froze the old weights refuses, and a new one
    compiles afresh (its own code copy) and decodes as eager does with the new weights."""
    sst = tiny_sst(2)
    first = StepCompiler(sst, "default")
    generate_compiled(sst, PROMPTS, 2, CONFIG, compiler=first)
    weight = sst.backbone.model.layers[0].mlp.down_proj.weight
    with torch.no_grad():
        weight.mul_(1.5)
    with pytest.raises(RuntimeError, match="weights changed after its decode step was compiled"):
        generate_compiled(sst, PROMPTS, 2, CONFIG, compiler=first)
    second = StepCompiler(sst, "default")
    eager_tokens, compiled_tokens, worst = eager_and_compiled(sst, second)
    assert compiled_tokens == eager_tokens and worst <= 1e-5
    weight.data = weight.data * 1.5
    with pytest.raises(RuntimeError, match="weights changed after its decode step was compiled"):
        generate_compiled(sst, PROMPTS, 2, CONFIG, compiler=second)


def test_the_autotuned_recipe_decodes_the_eager_tokens(monkeypatch):
    """What the 270M backbone gets (C++ GEMM templates timed beside ATen), on a one-layer model."""
    monkeypatch.setattr(compile_recipe, "GEMM_AUTOTUNE_MIN_PARAMETERS", 1)
    sst = tiny_sst(1)
    compiler = StepCompiler(sst, "default")
    assert compiler.recipe.endswith("+gemm-autotune")
    eager_tokens, compiled_tokens, worst = eager_and_compiled(sst, compiler)
    assert compiled_tokens == eager_tokens and worst <= 1e-5
