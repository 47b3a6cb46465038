"""Recorder against a fake model and driver: what is recorded, where, and for which rows."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special
import scipy.stats
import torch

from sst_interp.hooks import OwnedHooks, RecordConfig, Recorder, default_sketch_k, pack_signs, top_abs_indices
from tests.unit.hooks.fake import Stack, drive

IDS = ["qa", "qb", "qc"]


def _record(config, depth=2, positions=6, finish_at=(5, 1, 3), turn=0, seed=0):
    stack = Stack(seed=seed)
    prompt = torch.randn(3, 4, stack.hidden_size, generator=torch.Generator().manual_seed(seed))
    with Recorder(stack.layers, stack.hidden_size, IDS, config) as rec:
        truth = drive(stack, prompt, depth, positions, list(finish_at), rec, turn=turn)
    return stack, rec.columns(), truth


def _rows(columns, qid):
    mask = columns["question_id"] == qid
    keys = ("turn", "position", "iteration", "layer")
    coords = [tuple(int(columns[k][i]) for k in keys if k in columns) for i in np.flatnonzero(mask)]
    return np.flatnonzero(mask), coords


def test_hidden_rows_equal_layer_outputs_of_active_rows_in_the_full_window():
    _, cols, truth = _record(RecordConfig(full_positions=3, sketch_positions=0, logits=False))
    hidden = cols["hidden"]
    assert set(cols) == {"hidden"}
    for b, qid in enumerate(IDS):
        rows, coords = _rows(hidden, qid)
        # row qb finishes after position 1, so it has positions 0..1; the others have 0..2 (full window)
        last = {"qa": 2, "qb": 1, "qc": 2}[qid]
        expected = [(0, p, i, layer) for p in range(last + 1) for i in (1, 2) for layer in range(3)]
        assert coords == expected  # ordered by position, iteration, layer
        for row, (t, p, i, layer) in zip(rows, coords):
            assert torch.equal(hidden["values"][row], truth.outputs[(t, p, i, layer)][b])
    assert hidden["values"].dtype == torch.float32
    # nothing from the pass that emits nothing: no recorded vector equals a prompt-pass output
    for prompt_out in truth.prompt_outputs:
        for row in range(3):
            assert not (hidden["values"] == prompt_out[row]).all(-1).any()


def test_position_zero_is_always_recorded_and_records_stop_at_the_finishing_position():
    _, cols, truth = _record(RecordConfig(full_positions=0, sketch_positions=2, logits=True), depth=1,
                             finish_at=(0, 4, 1))
    hidden = cols["hidden"]
    assert sorted(set(hidden["position"].tolist())) == [0]
    assert sorted(set(hidden["question_id"].tolist())) == IDS
    # sketches: positions 1..2; qa finished at position 0, qc after position 1
    sk = cols["sketch"]
    got = {q: sorted(set(sk["position"][sk["question_id"] == q].tolist())) for q in IDS}
    assert got == {"qa": [], "qb": [1, 2], "qc": [1]}
    lg = cols["logits"]
    got = {q: sorted(set(lg["position"][lg["question_id"] == q].tolist())) for q in IDS}
    assert got == {"qa": [0], "qb": [0, 1, 2], "qc": [0, 1]}


def test_sketches_hold_the_top_k_abs_indices_sorted_ascending():
    config = RecordConfig(full_positions=1, sketch_positions=2, sketch_k=5, logits=False)
    _, cols, truth = _record(config, finish_at=(9, 9, 9))
    sk = cols["sketch"]
    assert sk["top_indices"].shape == (3 * 2 * 2 * 3, 5) and sk["top_indices"].dtype == torch.int32
    for b, qid in enumerate(IDS):
        rows, coords = _rows(sk, qid)
        assert sorted({c[1] for c in coords}) == [1, 2]
        for row, key in zip(rows, coords):
            value = truth.outputs[key][b].numpy()
            expected = np.sort(np.argsort(-np.abs(value), kind="stable")[:5])
            assert sk["top_indices"][row].tolist() == expected.tolist()


def test_default_sketch_k_scales_the_paper_ratio():
    assert default_sketch_k(5376) == 1024
    assert default_sketch_k(640) == 122  # 640 * 1024 / 5376 = 121.9
    assert default_sketch_k(4) == 1
    assert RecordConfig().resolved_sketch_k(16) == 3  # 16 * 1024 / 5376 = 3.05
    values = torch.tensor([[0.1, -5.0, 3.0, 0.2, -4.0]])
    assert top_abs_indices(values, 3).tolist() == [[1, 2, 4]]


def test_logit_summaries_match_an_independent_computation():
    _, cols, truth = _record(RecordConfig(full_positions=2, sketch_positions=1, top_k=4), depth=3,
                             finish_at=(9, 9, 9))
    lg = cols["logits"]
    assert "layer" not in lg
    for b, qid in enumerate(IDS):
        rows, coords = _rows(lg, qid)
        assert coords == [(0, p, i) for p in range(3) for i in (1, 2, 3)]
        for row, (t, p, i) in zip(rows, coords):
            raw = truth.logits[(t, p, i)][b].double().numpy()
            logprobs = scipy.special.log_softmax(raw)
            top = np.argsort(-logprobs, kind="stable")[:4]
            assert lg["top_ids"][row].tolist() == top.tolist()
            assert np.allclose(lg["top_logprobs"][row].numpy(), logprobs[top], atol=1e-6)
            assert int(lg["argmax"][row]) == int(np.argmax(raw))
            assert np.isclose(float(lg["entropy"][row]), scipy.stats.entropy(np.exp(logprobs)), atol=1e-6)
            first = np.argsort(-scipy.special.log_softmax(truth.logits[(t, p, 1)][b].double().numpy()),
                               kind="stable")[:4]
            assert np.allclose(lg["tracked_logprobs"][row].numpy(), logprobs[first], atol=1e-6)
    # at iteration 1 the tracked set is the pass's own top-K
    it1 = lg["iteration"] == 1
    assert torch.equal(lg["tracked_logprobs"][torch.from_numpy(it1)], lg["top_logprobs"][torch.from_numpy(it1)])


def test_gate_activity_and_sign_bits():
    _, cols, truth = _record(RecordConfig(full_positions=2, sketch_positions=3, gates=True, logits=False),
                             finish_at=(9, 0, 9))
    gates = cols["gates"]
    assert set(gates["position"].tolist()) == {0, 1}  # gates only in the full window
    for b, qid in enumerate(IDS):
        rows, coords = _rows(gates, qid)
        assert len(rows) == (1 if qid == "qb" else 2) * 2 * 3
        for row, key in zip(rows, coords):
            pre = truth.gates[key][b].numpy()
            assert np.isclose(float(gates["active_fraction"][row]), np.mean(pre > 0))
            assert gates["sign_bits"][row].numpy().tolist() == np.packbits(pre > 0).tolist()


@pytest.mark.parametrize("units", [1, 7, 8, 13, 64])
def test_pack_signs_matches_numpy_packbits(units):
    signs = torch.rand(4, units, generator=torch.Generator().manual_seed(units)) > 0.5
    assert pack_signs(signs).numpy().tolist() == np.packbits(signs.numpy(), axis=-1).tolist()


def test_bfloat16_capture_keeps_the_rounded_bits():
    _, cols, truth = _record(RecordConfig(full_positions=1, sketch_positions=0, dtype="bfloat16", logits=False))
    hidden = cols["hidden"]
    assert hidden["values"].dtype == torch.bfloat16
    rows, coords = _rows(hidden, "qc")
    for row, key in zip(rows, coords):
        assert torch.equal(hidden["values"][row].view(torch.int16),
                           truth.outputs[key][2].to(torch.bfloat16).view(torch.int16))


def test_turn_is_taken_from_the_pass_info():
    _, cols, _ = _record(RecordConfig(full_positions=1, sketch_positions=0), turn=3)
    assert set(cols["hidden"]["turn"].tolist()) == {3} and set(cols["logits"]["turn"].tolist()) == {3}


def test_no_hook_remains_after_a_failure_inside_generation():
    stack = Stack()
    modules = list(stack.layers) + [layer.mlp.gate_proj for layer in stack.layers]
    config = RecordConfig(full_positions=2, sketch_positions=2, gates=True)
    with pytest.raises(RuntimeError, match="boom"):
        with Recorder(stack.layers, stack.hidden_size, IDS, config) as rec:
            assert all(len(m._forward_hooks) == 1 for m in modules)
            drive(stack, torch.randn(3, 4, 16), 2, 5, [9, 9, 9], rec, fail_at=(1, 2))
    assert all(len(m._forward_hooks) == 0 for m in modules)
    with OwnedHooks() as hooks:
        hooks.forward(stack.layers[0], lambda *a: None)
        hooks.forward_pre(stack.layers[0], lambda *a: None)
        assert len(hooks) == 2
    assert not stack.layers[0]._forward_hooks and not stack.layers[0]._forward_pre_hooks


def test_batch_size_mismatch_is_an_error():
    stack = Stack()
    with Recorder(stack.layers, stack.hidden_size, ["only-one"], RecordConfig()) as rec:
        with pytest.raises(ValueError, match="3 rows"):
            drive(stack, torch.randn(3, 4, 16), 1, 2, [9, 9, 9], rec)
    assert not stack.layers[0]._forward_hooks
