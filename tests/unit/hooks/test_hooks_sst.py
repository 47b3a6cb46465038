"""Recorder on a tiny random SST (the lead's model and generation): recorded states equal a direct, cacheless
call of the model's layers; position 0 is the pass that emitted the first token; records stop at EOS."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sst_interp.hooks import RecordConfig, Recorder
from sst_interp.model import GenerationConfig, SSTConfig, SSTModel, generate
from sst_interp.model.scan import shift_states
from sst_interp.model.testing import tiny_gemma3, tiny_llama

PROMPTS = [[2, 40, 41, 42, 43], [2, 50, 51], [2, 60, 61, 62]]
IDS = ["long", "short", "mid"]


def _sst(builder):
    # float32: with left padding, transformers' eager attention gives NaN at fully masked (pad) query rows in
    # float64, which then leaks into real rows; float32 does not (seen with transformers 5.23)
    return SSTModel.from_backbone(builder(dtype=torch.float32), SSTConfig(state_scale="hidden"))


def direct_outputs(sst: SSTModel, prompt: list[int], tokens: list[int], depth: int) -> dict:
    """Layer outputs at the current position of every pass, by running the whole prefix without a cache in
    ``given`` mode (two-pass prompt, direct state update): {(position, iteration): {layer: [d]}}."""
    assert sst.config.update == "direct"
    layers = list(range(sst.num_layers))
    committed = {layer: [] for layer in layers}  # the state each committed position read at its final pass
    out = {}

    def run(seq, read):
        given = {layer: torch.stack(committed[layer] + [read[layer]])[None] for layer in layers}
        with sst.state_mode("given", given=given, capture="output") as outputs:
            sst.decoder_forward(input_ids=torch.tensor([seq]), use_cache=False)
        return {layer: outputs[layer][0, -1] for layer in layers}

    with torch.no_grad():
        with sst.state_mode("off", capture="output") as pass1:
            sst.decoder_forward(input_ids=torch.tensor([prompt]), use_cache=False)
        shifted = {layer: shift_states(pass1[layer])[0] for layer in layers}
        for t in range(len(prompt) - 1):
            for layer in layers:
                committed[layer].append(shifted[layer][t])
        read = {layer: shifted[layer][-1] for layer in layers}
        seq = list(prompt)
        for position, token in enumerate(tokens):
            if position > 0:
                seq.append(tokens[position - 1])
            for iteration in range(1, depth + 1):
                outputs = run(seq, read)
                out[(position, iteration)] = outputs
                if iteration < depth:
                    read = outputs  # C = o: the next iteration reads this pass's output
            for layer in layers:
                committed[layer].append(read[layer])
            read = outputs
    return out


@pytest.mark.parametrize("builder", [tiny_gemma3, tiny_llama])
def test_recorded_states_equal_a_direct_call_and_position0_emits_the_first_token(builder):
    sst = _sst(builder)
    depth, new = 2, 5
    config = RecordConfig(full_positions=3, sketch_positions=1, top_k=8)
    gen = GenerationConfig(max_new_tokens=new, logits_every_iteration=True)
    with Recorder.for_model(sst, IDS, config) as rec:
        result = generate(sst, PROMPTS, depth=depth, config=gen, observer=rec)
    cols = rec.columns()
    hidden, logits = cols["hidden"], cols["logits"]
    for row, qid in enumerate(IDS):
        tokens = result.token_ids[row]
        reference = direct_outputs(sst, PROMPTS[row], tokens, depth)
        mask = hidden["question_id"] == qid
        keys = list(zip(hidden["position"][mask], hidden["iteration"][mask], hidden["layer"][mask]))
        assert keys == [(p, i, layer) for p in range(3) for i in (1, 2) for layer in range(sst.num_layers)]
        values = hidden["values"][torch.from_numpy(mask)].numpy()
        expected = np.stack([reference[(p, i)][layer].float().numpy() for p, i, layer in keys])
        np.testing.assert_allclose(values, expected, rtol=1e-4, atol=1e-5)
        # the final iteration's argmax at position p is the p-th generated token (position 0 = first token)
        lmask = logits["question_id"] == qid
        final = lmask & (logits["iteration"] == depth)
        assert logits["position"][final].tolist() == [0, 1, 2, 3]
        assert logits["argmax"][torch.from_numpy(final)].tolist() == tokens[:4]
    # iterations move the state (state_scale="hidden"), so the test would see a wrong iteration
    first = hidden["values"][torch.from_numpy((hidden["iteration"] == 1) & (hidden["position"] == 0))]
    second = hidden["values"][torch.from_numpy((hidden["iteration"] == 2) & (hidden["position"] == 0))]
    assert not torch.allclose(first, second)


def test_records_stop_at_eos():
    sst = _sst(tiny_gemma3)
    probe = generate(sst, PROMPTS, depth=1, config=GenerationConfig(max_new_tokens=6))
    eos = probe.token_ids[0][2]  # make row 0's third token the end-of-sequence token
    gen = GenerationConfig(max_new_tokens=6, eos_token_ids=(eos,), logits_every_iteration=True)
    config = RecordConfig(full_positions=2, sketch_positions=10, top_k=4)
    with Recorder.for_model(sst, IDS, config) as rec:
        result = generate(sst, PROMPTS, depth=1, config=gen, observer=rec)
    assert result.stop_reasons[0] == "eos" and len(result.token_ids[0]) <= 3
    cols = rec.columns()
    for row, qid in enumerate(IDS):
        n = len(result.token_ids[row])
        for name in ("logits", "sketch"):
            got = sorted(set(cols[name]["position"][cols[name]["question_id"] == qid].tolist()))
            want = list(range(n)) if name == "logits" else list(range(2, n))
            assert got == want, (name, qid, result.stop_reasons[row])
    assert all(not layer._forward_hooks for layer in sst.layers)
