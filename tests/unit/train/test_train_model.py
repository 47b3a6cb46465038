"""The trained model: gradient paths of the two-pass step, parameter groups, checkpointing, packing, merging."""

from __future__ import annotations

import contextlib

import pytest
import torch

from sst_interp.kernels.errors import UsageError
from sst_interp.model.checkpoint import load_checkpoint
from sst_interp.model.testing import tiny_gemma3
from sst_interp.train.data import collate, data_format_from_config, pack_examples, tokenize_row
from sst_interp.train.loop import micro_batch_loss
from sst_interp.train.loss import chunked_cross_entropy
from sst_interp.train.modeling import build_train_model
from sst_interp.train.optim import build_optimizer, build_scheduler
from sst_interp.model.baseline_checkpoint import load_baseline_checkpoint
from sst_interp.train.state import save_model

from .conftest import chat_rows, tiny_backbone, tiny_config


def _batch(config, tokenizer, n=2, pack=False):
    fmt = data_format_from_config(config)
    examples = [tokenize_row(row, tokenizer, fmt, i) for i, row in enumerate(chat_rows(n))]
    return collate(pack_examples(examples, 512, pack), tokenizer.pad_token_id)


def _model(config, family="gemma3", seed=0):
    torch.manual_seed(seed)
    model = build_train_model(tiny_backbone(family), config)
    with torch.no_grad():  # peft starts B at zero; random B makes every adapter path carry signal
        for name, param in model.peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1)
    return model


def _pass2_only_loss(model, batch):
    """The same loss with the pass-1 states detached: gradients then come from pass 2 alone."""
    sst = model.sst
    states = sst.pass1_states(batch.input_ids, None, batch.position_ids, batch.segment_starts)
    with sst.state_mode("given", given={k: v.detach() for k, v in states.items()}):
        hidden = sst.decoder_forward(input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False)
    return chunked_cross_entropy(hidden, batch.labels, model.head, 64)[0]


def test_pass2_loss_gradient_includes_the_pass1_path(tmp_path, tokenizer):
    config = tiny_config(tmp_path)
    model = _model(config)
    batch = _batch(config, tokenizer)
    params = model.lora_parameters()
    loss, _ = micro_batch_loss(model, batch, 64)
    full = torch.autograd.grad(loss, params)
    pass2 = torch.autograd.grad(_pass2_only_loss(model, batch), params)
    direction = [torch.randn(p.shape, generator=torch.Generator().manual_seed(i), dtype=p.dtype)
                 for i, p in enumerate(params)]
    analytic = sum(float((g * v).sum()) for g, v in zip(full, direction))
    analytic_pass2 = sum(float((g * v).sum()) for g, v in zip(pass2, direction))
    eps = 1e-4
    with torch.no_grad():  # central finite difference of the real loss along the random direction
        for p, v in zip(params, direction):
            p.add_(eps * v)
        plus = float(micro_batch_loss(model, batch, 64)[0])
        for p, v in zip(params, direction):
            p.sub_(2 * eps * v)
        minus = float(micro_batch_loss(model, batch, 64)[0])
    numeric = (plus - minus) / (2 * eps)
    fd_error = abs(numeric - analytic)
    assert fd_error < 0.01 * abs(analytic)
    # the pass-1 contribution is large: dropping it misses the true derivative by far more than the FD error
    assert abs(numeric - analytic_pass2) > max(20 * fd_error, 0.05 * abs(analytic))


def test_gradients_reach_pass1_lora_and_sst_params(tmp_path, tokenizer):
    config = tiny_config(tmp_path)
    model = _model(config)
    batch = _batch(config, tokenizer)
    loss, _ = micro_batch_loss(model, batch, 64)
    loss.backward()
    sst_params = model.sst.state_parameters()
    assert len(sst_params) == 2 * 3
    assert all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in sst_params)
    lora = dict(model.peft_model.named_parameters())
    first = [n for n in lora if "layers.0." in n and "lora_" in n]
    assert first and all(float(lora[n].grad.abs().sum()) > 0 for n in first)
    # frozen backbone weights get no gradient
    assert all(p.grad is None for n, p in model.backbone.named_parameters() if "base_layer" in n)


def test_sst_params_stay_trainable_in_their_own_group(tmp_path):
    config = tiny_config(tmp_path)
    model = _model(config)
    sst_params = model.sst.state_parameters()
    assert all(p.requires_grad and p.dtype == torch.float32 for p in sst_params)
    optimizer = build_optimizer(model.lora_parameters(), model.sst_parameters(), config)
    build_scheduler(optimizer, config)
    groups = {g["name"]: g for g in optimizer.param_groups}
    assert set(groups) == {"lora", "sst"}
    assert {id(p) for p in groups["sst"]["params"]} == {id(p) for p in sst_params}
    assert not {id(p) for p in groups["lora"]["params"]} & {id(p) for p in sst_params}
    assert groups["sst"]["lr"] == 1e-2 and groups["sst"]["weight_decay"] == 0.0
    assert groups["lora"]["initial_lr"] == 1e-4 and groups["lora"]["lr"] == 0.0  # warmup starts at 0
    trainable = {id(p) for p in model.backbone.parameters() if p.requires_grad}
    assert trainable == {id(p) for g in optimizer.param_groups for p in g["params"]}


def test_baseline_has_no_state_stream(tmp_path):
    model = _model(tiny_config(tmp_path, baseline=True))
    assert model.sst is None and model.sst_parameters() == []
    assert not any("sst_state" in n for n, _ in model.backbone.named_parameters())


def _grads(model, batch):
    model.train()
    loss, _ = micro_batch_loss(model, batch, 5)
    loss.backward()
    return float(loss), {n: p.grad.clone() for n, p in model.backbone.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("baseline", [False, True])
def test_gradient_checkpointing_gives_identical_gradients(tmp_path, tokenizer, baseline):
    batch = _batch(tiny_config(tmp_path), tokenizer, n=3, pack=True)
    loss_plain, plain = _grads(_model(tiny_config(tmp_path, baseline=baseline)), batch)
    loss_ckpt, ckpt = _grads(_model(tiny_config(tmp_path, baseline=baseline, gradient_checkpointing=True)), batch)
    assert loss_plain == loss_ckpt and plain.keys() == ckpt.keys()
    for name in plain:
        torch.testing.assert_close(ckpt[name], plain[name], rtol=1e-10, atol=1e-12)


def test_checkpoint_recomputation_needs_the_replayed_sst_context(tmp_path, tokenizer, monkeypatch):
    import sst_interp.train.modeling as modeling

    # Without the context replay the backward recomputes pass-2 layers with the blend off, and torch notices.
    monkeypatch.setattr(modeling, "sst_checkpoint_context",
                        lambda sst: lambda: (contextlib.nullcontext(), contextlib.nullcontext()))
    model = _model(tiny_config(tmp_path, gradient_checkpointing=True))
    model.train()
    loss, _ = micro_batch_loss(model, _batch(tiny_config(tmp_path), tokenizer), 64)
    with pytest.raises(torch.utils.checkpoint.CheckpointError):
        loss.backward()


@pytest.mark.parametrize("baseline", [False, True])
def test_packed_documents_match_separate_forwards(tmp_path, tokenizer, baseline):
    config = tiny_config(tmp_path, baseline=baseline)
    model = _model(config)
    model.eval()
    packed = _batch(config, tokenizer, n=3, pack=True)
    assert packed.input_ids.shape[0] == 1 and len(packed.example_indices[0]) == 3
    fmt = data_format_from_config(config)
    with torch.no_grad():
        whole = model.hidden(packed)[0]
        cursor = 0
        for index, row in enumerate(chat_rows(3)):
            single = collate(pack_examples([tokenize_row(row, tokenizer, fmt, index)], 512, False), 0)
            n = single.input_ids.shape[1]
            alone = model.hidden(single)[0]
            # each document sees only itself and starts from a zero state
            torch.testing.assert_close(whole[cursor : cursor + n], alone, rtol=1e-6, atol=1e-6)
            cursor += n
    assert cursor == whole.shape[0]


def test_merged_checkpoint_reproduces_the_trained_model(tmp_path, tokenizer):
    config = tiny_config(tmp_path)
    model = _model(config)
    with torch.no_grad():
        for param in model.sst.state_parameters():
            param.add_(0.3 * torch.randn_like(param))
    model.eval()
    batch = _batch(config, tokenizer, n=1)
    with torch.no_grad():
        expected = model.head(model.hidden(batch))
    save_model(model, tmp_path / "ckpt", "tiny-gemma3", {"step": 0})
    loaded = load_checkpoint(tiny_gemma3(), tmp_path / "ckpt")  # merges the adapter into the tied weight
    with torch.no_grad():
        got = loaded.lm_logits(loaded.two_pass_hidden(batch.input_ids, None, batch.position_ids, batch.segment_starts))
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


def test_merged_baseline_checkpoint_reproduces_the_trained_model(tmp_path, tokenizer):
    config = tiny_config(tmp_path, baseline=True)
    model = _model(config)
    model.eval()
    batch = _batch(config, tokenizer, n=1)
    with torch.no_grad():
        expected = model.head(model.hidden(batch))
        save_model(model, tmp_path / "ckpt", "tiny-gemma3", {"step": 0})
        merged = load_baseline_checkpoint(tiny_gemma3(), tmp_path / "ckpt")
        got = merged(input_ids=batch.input_ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


def test_untied_llama_trains_too(tmp_path, tokenizer):
    config = tiny_config(tmp_path)
    model = _model(config, family="llama")
    loss, n = micro_batch_loss(model, _batch(config, tokenizer), 64)
    loss.backward()
    assert n > 0 and all(p.grad is not None for p in model.sst.state_parameters())


def test_unknown_lora_targets_are_refused(tmp_path):
    with pytest.raises(UsageError, match=r"LoRA targets \['qkv'\] are not modules"):
        build_train_model(tiny_backbone(), tiny_config(tmp_path, lora_targets=["q_proj", "qkv"]))


@pytest.mark.parametrize("baseline", [False, True])
def test_padded_micro_batch_equals_its_rows(tmp_path, tokenizer, baseline):
    config = tiny_config(tmp_path, baseline=baseline)
    model = _model(config)
    model.eval()
    fmt = data_format_from_config(config)
    rows = [chat_rows(1)[0], {"text": chat_rows(1, offset=3)[0]["text"] + "<start_of_turn>model\nmore<end_of_turn>"}]
    examples = [tokenize_row(row, tokenizer, fmt, i) for i, row in enumerate(rows)]
    both = collate(pack_examples(examples, 512, False), tokenizer.pad_token_id)
    assert (both.input_ids == tokenizer.pad_token_id).any()  # the first row is padded
    with torch.no_grad():
        together, n = micro_batch_loss(model, both, 7)
        parts = [micro_batch_loss(model, collate([s], 0), 7) for s in pack_examples(examples, 512, False)]
    assert n == sum(p[1] for p in parts)
    torch.testing.assert_close(together, sum(p[0] for p in parts), rtol=1e-6, atol=1e-6)
