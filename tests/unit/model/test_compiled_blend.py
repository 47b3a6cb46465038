"""SSTModel.compile_blend: the torch.compile-fused blend gives the eager blend's values (to float32 rounding) and the
same greedy tokens, and passes that need gradients stay eager."""

from __future__ import annotations

import pytest
import torch

from sst_interp.model import GenerationConfig, SSTConfig, SSTModel, generate
from sst_interp.model.state_stream import blend
from sst_interp.model.testing import tiny_gemma3


@pytest.mark.slow
def test_compiled_blend_equals_eager_blend_and_tokens():
    sst = SSTModel.from_backbone(tiny_gemma3(dtype=torch.float32), SSTConfig(state_scale="hidden"))
    prompts = [[2, 5, 6, 7, 8], [2, 9, 10]]
    config = GenerationConfig(max_new_tokens=6)
    eager = generate(sst, prompts, 3, config)
    module = sst.state_modules()[1]
    hidden, state = torch.randn(2, 3, 32), torch.randn(2, 3, 32)
    with torch.no_grad():
        expected = module.blend(hidden, state)
        sst.compile_blend()
        fused = module.blend(hidden, state)
    torch.testing.assert_close(fused, expected, rtol=1e-6, atol=1e-6)
    assert generate(sst, prompts, 3, config).token_ids == eager.token_ids
    sst.compile_blend(False)
    assert not module.compiled_blend


def test_blend_with_gradients_never_uses_the_compiled_kernel(monkeypatch):
    sst = SSTModel.from_backbone(tiny_gemma3(dtype=torch.float32), SSTConfig()).compile_blend()
    module = sst.state_modules()[0]
    calls = []
    monkeypatch.setattr("sst_interp.model.state_stream._COMPILED_BLEND", lambda *a: calls.append(a) or blend(*a))
    hidden = torch.randn(1, 2, 32, requires_grad=True)
    module.blend(hidden, torch.randn(1, 2, 32)).sum().backward()
    assert calls == [] and hidden.grad is not None
    with torch.no_grad():
        module.blend(hidden, torch.randn(1, 2, 32))
    assert len(calls) == 1
