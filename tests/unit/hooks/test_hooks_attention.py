"""Attention recorded per (iteration, layer, head) on tiny float64 models: recording changes no token and no state;
the weights are the model's own (transformers' ``output_attentions`` of the same forward, in visit order for a looped
family); under sdpa they are computed from the kernel's own query and key and equal eager attention's; top-k keeps
the heaviest keys and their remaining mass; left padding is not a key."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from sst_interp.hooks import AttentionConfig, RecordConfig, Recorder, VisitRecorder
from sst_interp.hooks.attention_weights import KernelWeights, weights_from_qk
from sst_interp.model import GenerationConfig, SSTConfig, SSTModel, generate
from sst_interp.model.generation import GenerationConfig as LoopGenerationConfig
from sst_interp.model.loop_model import LoopModel, generate_looped
from sst_interp.model.testing import tiny_dory, tiny_gemma3, tiny_hrm_text, tiny_inkling2_loop, tiny_llama

#: equal lengths: float64 eager attention gives NaN at fully masked (left-padding) query rows (tests/unit/hooks)
PROMPTS = [[2, 40, 41, 42, 43, 44, 45], [2, 50, 51, 52, 53, 54, 55]]
IDS = ["a", "b"]


def _sst(builder=tiny_gemma3, implementation: str = "eager", dtype=torch.float64) -> SSTModel:
    backbone = builder(dtype=dtype)
    if implementation != "eager":
        backbone.set_attn_implementation(implementation)
    return SSTModel.from_backbone(backbone, SSTConfig(state_scale="hidden"))


def _config(attention: AttentionConfig | None) -> RecordConfig:
    return RecordConfig(full_positions=3, sketch_positions=2, top_k=5, attention=attention)


def _record_sst(sst: SSTModel, attention: AttentionConfig | None, prompts=PROMPTS, ids=IDS, depth: int = 3,
                mode: str = "two_pass") -> tuple:
    config = GenerationConfig(max_new_tokens=4, prompt_mode=mode, logits_every_iteration=True)
    with Recorder.for_model(sst, ids, _config(attention)) as recorder:
        result = generate(sst, prompts, depth, config, observer=recorder)
    return result, recorder.columns()


def _record_loop(model: LoopModel, attention: AttentionConfig | None, depth: int = 2) -> tuple:
    with VisitRecorder.for_model(model, IDS, _config(attention)) as recorder:
        result = generate_looped(model, PROMPTS, depth, LoopGenerationConfig(max_new_tokens=4), observer=recorder)
    return result, recorder.columns()


def _rows(columns: dict) -> dict[tuple, tuple[np.ndarray, np.ndarray, float]]:
    """(question, turn, position, iteration, layer, head) -> (key positions, weights, remaining mass)."""
    offsets = columns["offsets"]
    out = {}
    for i, qid in enumerate(columns["question_id"]):
        key = (str(qid), *(int(columns[c][i]) for c in ("turn", "position", "iteration", "layer", "head")))
        span = slice(offsets[i], offsets[i + 1])
        assert key not in out
        out[key] = (columns["key_positions"][span], columns["weights"][span], float(columns["remaining_mass"][i]))
    return out


def _same_columns(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for kind in a:
        for name, value in a[kind].items():
            left, right = value, b[kind][name]
            if isinstance(left, torch.Tensor):
                assert torch.equal(left, right), (kind, name)
            else:
                assert np.array_equal(left, right), (kind, name)


def test_recording_attention_changes_no_token_and_no_state_of_an_sst() -> None:
    sst = _sst()
    plain, plain_columns = _record_sst(sst, None)
    recorded, columns = _record_sst(sst, AttentionConfig())
    assert recorded.token_ids == plain.token_ids
    attention = columns.pop("attention")
    _same_columns(plain_columns, columns)  # hidden, sketch and logits bit for bit
    # every full position's query, at every iteration, layer and head, for both questions
    assert len(attention["question_id"]) == 2 * 3 * 3 * sst.num_layers * 2


@pytest.mark.parametrize("builder", [tiny_hrm_text, tiny_dory, tiny_inkling2_loop])
def test_recording_attention_changes_no_token_and_no_state_of_a_looped_family(builder) -> None:
    model = LoopModel(builder(dtype=torch.float64) if builder is not tiny_inkling2_loop else builder())
    plain, plain_columns = _record_loop(model, None)
    recorded, columns = _record_loop(model, AttentionConfig(layers=(1, 4), heads=(1,)))
    assert recorded.token_ids == plain.token_ids
    attention = columns.pop("attention")
    _same_columns(plain_columns, columns)
    assert set(attention["layer"]) == {1, 4} and set(attention["head"]) == {1}


def test_sst_weights_are_the_backbones_own_at_the_plain_pass() -> None:
    """Position 0, iteration 1 under the prompt mode none is a plain transformer pass over the prompt: its weights
    are the backbone's own ``output_attentions`` at the last column, key by key."""
    sst = _sst(tiny_llama)
    _, columns = _record_sst(sst, AttentionConfig(), mode="none", depth=2)
    rows = _rows(columns["attention"])
    for row, (qid, prompt) in enumerate(zip(IDS, PROMPTS)):
        with torch.no_grad():
            reference = sst.backbone(input_ids=torch.tensor([prompt]), output_attentions=True).attentions
        for layer in range(sst.num_layers):
            for head in range(2):
                keys, weights, rest = rows[(qid, 0, 0, 1, layer, head)]
                assert keys.tolist() == list(range(len(prompt)))
                assert np.array_equal(weights, reference[layer][0, head, -1].float().numpy())
                assert abs(rest) < 1e-6


@pytest.mark.parametrize("builder", [tiny_hrm_text, tiny_dory, tiny_inkling2_loop])
def test_a_looped_familys_iteration_is_the_visit_index(builder) -> None:
    """A family's own forward lists its self-attentions in call order, which is the order of its declared visits
    (HRM-Text: H-cycle by H-cycle, the slots of one cycle in turn; Dory and Inkling-2 Loop: the layers before the
    looped block, its passes, the layers after it). The recorded (iteration, layer) of each call is that visit: the
    same numbering as the states (Dory's passes are counted, not read from keywords). Inkling-2 Loop computes in
    float32 only, and its cached prefill rounds a float32 ulp away from the uncached forward."""
    backbone = builder(dtype=torch.float64) if builder is not tiny_inkling2_loop else builder()
    tolerance = 1e-6 if builder is tiny_inkling2_loop else 0.0
    model = LoopModel(backbone)
    depth = 2
    _, columns = _record_loop(model, AttentionConfig(), depth=depth)
    rows = _rows(columns["attention"])
    visits = model.loop.visits(model.config, depth)
    for qid, prompt in zip(IDS, PROMPTS):
        with model.at_depth(depth), torch.no_grad():
            calls = backbone(input_ids=torch.tensor([prompt]), output_attentions=True).attentions
        assert len(calls) == len(visits)
        for (iteration, layer), weights in zip(visits, calls):
            for head in range(2):
                keys, recorded, _ = rows[(qid, 0, 0, iteration, layer, head)]
                # every key the query sees (a sliding window's last ones), and no weight outside them
                assert keys.tolist() == list(range(len(prompt) - len(keys), len(prompt)))
                reference = weights[0, head, -1].float().numpy()
                assert np.abs(recorded - reference[keys]).max() <= tolerance
                assert not reference[:len(prompt) - len(keys)].any()


@pytest.mark.parametrize("builder", [tiny_gemma3, tiny_llama, tiny_hrm_text, tiny_dory, tiny_inkling2_loop])
def test_weights_from_the_kernels_query_and_key_equal_eager_attention(builder) -> None:
    """At every self-attention call of each family, the weights computed from the query and key the kernel gets
    (with the mask as sdpa takes it, boolean) equal the weights eager attention returns, to 1e-12."""
    model = builder(dtype=torch.float64) if builder is not tiny_inkling2_loop else builder()
    attention_modules = {id(module) for module in model.modules() if type(module).__name__.endswith("Attention")
                         and hasattr(module, "layer_idx")}
    gaps: list[float] = []

    def checking(module, query, key, value, attention_mask, **kwargs):
        output, weights = sys.modules[type(module).__module__].eager_attention_forward(
            module, query, key, value, attention_mask, **kwargs)
        if id(module) in attention_modules:
            boolean = None if attention_mask is None else attention_mask == 0
            ours = weights_from_qk(module, query, key, boolean, **kwargs)
            gaps.append(float((ours - weights[:, :, -1:, :]).abs().max()))
        return output, weights

    ALL_ATTENTION_FUNCTIONS["eager"] = checking
    try:
        with torch.no_grad():
            model(input_ids=torch.tensor([PROMPTS[0]]), attention_mask=torch.ones(1, len(PROMPTS[0]), dtype=torch.long))
    finally:
        del ALL_ATTENTION_FUNCTIONS["eager"]
    assert gaps and max(gaps) <= 1e-12


def test_sdpa_weights_equal_eager_weights_end_to_end() -> None:
    """The same float64 SST run with sdpa attention: the same tokens, the same keys; layer 0 of the first pass reads
    the same query and key (the embeddings) in both runs, so its weights agree to 1e-12; deeper layers read states
    that sdpa's rounding moved by ~1e-16, which eager's float32 softmax turns into at most a few float32 ulps."""
    eager, eager_columns = _record_sst(_sst(), AttentionConfig())
    sdpa, sdpa_columns = _record_sst(_sst(implementation="sdpa"), AttentionConfig())
    assert sdpa.token_ids == eager.token_ids
    assert "sdpa" not in ALL_ATTENTION_FUNCTIONS._local_mapping  # the wrapper is gone with the recorder
    a, b = _rows(eager_columns["attention"]), _rows(sdpa_columns["attention"])
    assert a.keys() == b.keys()
    for key, (keys, weights, _) in a.items():
        assert np.array_equal(keys, b[key][0])
        gap = np.abs(weights - b[key][1]).max()
        assert gap <= (1e-12 if key[2:5] == (0, 1, 0) else 1e-6), (key, gap)


def test_the_kernel_wrapper_is_removed_after_an_exception() -> None:
    module = torch.nn.Linear(2, 2)
    with pytest.raises(RuntimeError, match="inside"):
        with KernelWeights([module], "sdpa"):
            assert "sdpa" in ALL_ATTENTION_FUNCTIONS._local_mapping
            raise RuntimeError("inside")
    assert "sdpa" not in ALL_ATTENTION_FUNCTIONS._local_mapping


def test_top_k_keeps_the_heaviest_keys_and_their_remaining_mass() -> None:
    sst = _sst()
    _, every = _record_sst(sst, AttentionConfig(heads=(0,)))
    _, top = _record_sst(sst, AttentionConfig(heads=(0,), top_k=2))
    full, kept = _rows(every["attention"]), _rows(top["attention"])
    assert full.keys() == kept.keys()
    for key, (keys, weights, _) in full.items():
        order = np.argsort(-weights, kind="stable")[:2]
        top_keys, top_weights, rest = kept[key]
        assert np.array_equal(top_weights, weights[order]) and set(top_keys) == set(keys[order])
        assert rest == pytest.approx(1 - float(np.sum(weights[order], dtype=np.float64)), abs=1e-7)


def test_left_padding_is_not_a_key() -> None:
    """In a batch with prompts of different lengths, every row's keys count its own tokens from 0, and its weights
    are those of the same prompt recorded alone (float32: padding rows are NaN-free there)."""
    sst = _sst(tiny_llama, dtype=torch.float32)
    prompts = [[2, 40, 41, 42, 43, 44, 45], [2, 50, 51]]
    _, batched = _record_sst(sst, AttentionConfig(), prompts=prompts)
    rows = _rows(batched["attention"])
    for qid, prompt in zip(IDS, prompts):
        _, alone = _record_sst(sst, AttentionConfig(), prompts=[prompt], ids=[qid])
        single = _rows(alone["attention"])
        for key, (keys, weights, _) in single.items():
            assert keys.tolist() == list(range(len(prompt) + key[2]))
            assert np.array_equal(rows[key][0], keys)
            assert np.abs(rows[key][1] - weights).max() < 1e-5
