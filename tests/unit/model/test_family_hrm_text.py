"""HRM-Text through the family pipeline, exact in float64 on a tiny random ``HrmTextForCausalLM`` (2 blocks per
stack, H_cycles x (L_cycles + 1) = 2 x 3 visits of 2 blocks per token):

- the loop declaration's visits are transformers' own KV-slot layout and ``output_hidden_states`` order;
- generation with the KV cache equals transformers' own ``generate`` (tokens and logits) at every depth, with and
  without the recorder attached;
- every recorded hidden state equals the same visit's output from ``output_hidden_states`` of the same call;
- the lens at the last iteration is the model's own distribution;
- cached generation equals a full recompute without a cache, over many positions.
"""

from __future__ import annotations

import pytest
import torch

from sst_interp.hooks import RecordConfig, VisitRecorder
from sst_interp.kernels.errors import UsageError
from sst_interp.model.generation import GenerationConfig
from sst_interp.model.loop_model import LoopModel, generate_looped
from sst_interp.model.loops import HRM_TEXT_LOOP, SST_LOOP, hrm_address, loop_for_model_type
from sst_interp.model.testing import tiny_hrm_text
from tests.unit.observers import KeptLogits

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = [2, 17, 40, 9, 33, 5]
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def hrm() -> LoopModel:
    return LoopModel(tiny_hrm_text(dtype=torch.float64))


def _hf_generate(model: LoopModel, depth: int, prompt: list[int] = PROMPT) -> tuple[list[int], list[torch.Tensor]]:
    """transformers' own greedy generate at ``depth`` H-cycles: (tokens, per-step logits [V], float32 as generate
    returns them)."""
    with model.at_depth(depth):
        out = model.backbone.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                      min_new_tokens=NEW_TOKENS, return_dict_in_generate=True, output_logits=True,
                                      pad_token_id=0, eos_token_id=None)
    return out.sequences[0, len(prompt):].tolist(), [step[0] for step in out.logits]


def _config() -> GenerationConfig:
    return GenerationConfig(max_new_tokens=NEW_TOKENS)


def test_hrm_family_declaration_matches_transformers_slot_layout(hrm: LoopModel) -> None:
    config = hrm.config
    assert hrm.num_layers == 6 and hrm.layer_names[:2] == ["L0.L_module.layers.0", "L0.L_module.layers.1"]
    assert hrm.layer_names[4:] == ["H.H_module.layers.0", "H.H_module.layers.1"]
    for depth in (1, 2, 3):
        visits = HRM_TEXT_LOOP.visits(config, depth)
        # one visit per KV slot transformers allocates at this depth, every slot once
        assert len(visits) == HRM_TEXT_LOOP.depth_fields(config, depth)["num_hidden_layers"] == 6 * depth
        assert HRM_TEXT_LOOP.iterations_per_layer(config, depth) == [depth] * 6
    # the slot transformers computes for L visit l of H-cycle h, block j, is (h*(L+1)+l)*n + j
    assert hrm_address(config, 1, (1 * 3 + 1) * 2) == (2, 3)
    assert hrm_address(config, 0, (0 * 3 + 2) * 2) == (1, 4)  # the H visit of cycle 1
    assert loop_for_model_type("hrm_text") is HRM_TEXT_LOOP and loop_for_model_type("gemma3_text") is SST_LOOP


def test_hrm_unsupported_model_type_names_the_families() -> None:
    with pytest.raises(UsageError, match="unsupported model_type 'gpt2'; supported families: sst .*hrm_text"):
        loop_for_model_type("gpt2")
    with pytest.raises(UsageError, match="hrm_text: a depth is an integer >= 1"):
        HRM_TEXT_LOOP.check_depth(0)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_hrm_generation_equals_transformers_generate_with_and_without_recording(hrm: LoopModel, depth: int) -> None:
    tokens, logits = _hf_generate(hrm, depth)
    plain = KeptLogits()
    result = generate_looped(hrm, [PROMPT], depth, _config(), observer=plain)
    assert result.token_ids[0] == tokens
    for ours, theirs in zip(plain.logits, logits, strict=True):
        assert torch.equal(ours.to(theirs.dtype), theirs)  # generate hands its logits out as float32
    # recording changes nothing: the same tokens and the same logits, bit for bit
    config = RecordConfig(full_positions=4, sketch_positions=4, top_k=8)
    seen = KeptLogits()

    class Both(VisitRecorder):
        def on_pass_end(self, info, logits) -> None:  # noqa: ANN001
            seen.on_pass_end(info, logits)
            super().on_pass_end(info, logits)

    with Both(*_sites(hrm), hrm.lens, hrm.hidden_size, ["q"], config) as recorder:
        recorded = generate_looped(hrm, [PROMPT], depth, _config(), observer=recorder)
    assert recorded.token_ids == result.token_ids
    assert all(torch.equal(a, b) for a, b in zip(seen.logits, plain.logits, strict=True))
    assert hrm.config.H_cycles == 2 and hrm.config.num_hidden_layers == 12  # the depth context restored the config
    columns = recorder.columns()
    hidden = columns["hidden"]
    # full positions 0..3, every (iteration, recorded layer) once
    assert len(hidden["position"]) == 4 * depth * 6
    assert sorted(set(zip(hidden["iteration"].tolist(), hidden["layer"].tolist()))) == \
        sorted(HRM_TEXT_LOOP.visits(hrm.config, depth))
    assert len(columns["sketch"]["position"]) == 4 * depth * 6
    assert sorted(set(columns["logits"]["iteration"].tolist())) == list(range(1, depth + 1))


def _sites(model: LoopModel) -> tuple[list, list]:
    return model.loop.visit_sites(model.backbone), model.loop.lens_sites(model.backbone)


@pytest.mark.parametrize("depth", [1, 2])
def test_hrm_recorded_states_equal_output_hidden_states_of_each_visit(hrm: LoopModel, depth: int) -> None:
    """Replay the same cached calls through transformers with ``output_hidden_states``: one entry per visit (plus
    the embeddings first: 13 at depth 2), in the declaration's visit order; each recorded state is that entry."""
    config = RecordConfig(full_positions=NEW_TOKENS, sketch_positions=0, top_k=8)
    with VisitRecorder.for_model(hrm, ["q"], config) as recorder:
        result = generate_looped(hrm, [PROMPT], depth, _config(), observer=recorder)
    hidden = recorder.columns()["hidden"]
    recorded = {(int(p), int(i), int(l)): hidden["values"][n]
                for n, (p, i, l) in enumerate(zip(hidden["position"], hidden["iteration"], hidden["layer"]))}
    visits = HRM_TEXT_LOOP.visits(hrm.config, depth)
    sequence = PROMPT + result.token_ids[0]
    last_block: list[torch.Tensor] = []
    # transformers puts the final-normed z_H in the last entry of output_hidden_states; the last visit's own output
    # comes from a plain hook on its module instead
    handle = hrm.backbone.model.H_module.layers[-1].register_forward_hook(
        lambda module, args, output: last_block.append(output[0, -1]))
    try:
        with hrm.at_depth(depth), torch.no_grad():
            cache = None
            for position in range(NEW_TOKENS):
                ids = torch.tensor([sequence[: len(PROMPT)]]) if position == 0 else \
                    torch.tensor([[sequence[len(PROMPT) + position - 1]]])
                out = hrm.backbone(input_ids=ids, cache=cache, use_cache=True, output_hidden_states=True)
                cache = out.cache
                states = out.hidden_states
                assert len(states) == 1 + len(visits)  # 13 at depth 2 (the count)
                for n, (iteration, layer) in enumerate(visits):
                    last = n == len(visits) - 1
                    reference = (last_block[-1] if last else states[1 + n][0, -1]).to(torch.float32)
                    assert torch.equal(recorded[(position, iteration, layer)], reference), (position, iteration, layer)
                final_norm = hrm.backbone.model.H_module.final_norm
                assert torch.equal(final_norm(last_block[-1]), states[-1][0, -1])
    finally:
        handle.remove()


@pytest.mark.parametrize("depth", [1, 3])
def test_hrm_lens_is_lm_head_on_z_h_and_the_last_iteration_is_the_models_logits(hrm: LoopModel, depth: int) -> None:
    config = RecordConfig(full_positions=2, sketch_positions=0, top_k=8)
    kept = KeptLogits()

    class Keep(VisitRecorder):
        def on_pass_end(self, info, logits) -> None:  # noqa: ANN001
            kept.on_pass_end(info, logits)
            super().on_pass_end(info, logits)

    with Keep(*_sites(hrm), hrm.lens, hrm.hidden_size, ["q"], config) as recorder:
        generate_looped(hrm, [PROMPT], depth, GenerationConfig(max_new_tokens=2), observer=recorder)
    logits = recorder.columns()["logits"]
    for position in (0, 1):
        row = [n for n in range(len(logits["position"]))
               if logits["position"][n] == position and logits["iteration"][n] == depth]
        assert len(row) == 1
        expected = torch.log_softmax(kept.logits[position].float(), -1).topk(8)
        assert torch.allclose(logits["top_logprobs"][row[0]], expected.values, atol=1e-6, rtol=0)
        assert torch.equal(logits["top_ids"][row[0]].long(), expected.indices)


@pytest.mark.parametrize("depth", [1, 2])
def test_hrm_cached_generation_equals_full_recompute(hrm: LoopModel, depth: int) -> None:
    """Each position's logits from the cached generation equal a forward over the whole prefix without a cache (the
    slot offsets of every cycle must line up for this: where TransformerLens's bridge breaks)."""
    many = 12
    kept = KeptLogits()
    result = generate_looped(hrm, [PROMPT], depth, GenerationConfig(max_new_tokens=many), observer=kept)
    sequence = PROMPT + result.token_ids[0]
    with hrm.at_depth(depth), torch.no_grad():
        full = hrm.backbone(input_ids=torch.tensor([sequence[:-1]]), use_cache=False).logits[0]
    for position in range(many):
        reference = full[len(PROMPT) - 1 + position]
        # transformers' eager attention takes its softmax in float32 even for a float64 model, so a call over a
        # different number of (masked) columns rounds differently there: measured up to 3e-9 on these logits
        # (position 0 at depth 2), 1e-16 elsewhere
        assert torch.allclose(kept.logits[position], reference, atol=1e-7, rtol=0), position
        assert int(reference.argmax()) == result.token_ids[0][position]


def test_hrm_depth_beyond_the_trained_count_runs_and_restores(hrm: LoopModel) -> None:
    with hrm.at_depth(5):
        assert hrm.config.H_cycles == 5 and hrm.config.num_hidden_layers == 30
    assert hrm.config.H_cycles == 2 and hrm.config.num_hidden_layers == 12
    with pytest.raises(UsageError):
        with hrm.at_depth(0):
            pass
    assert hrm.config.H_cycles == 2
