"""Optimiser groups and schedules (tab:hyperparameters) and the pickle-free optimiser state round trip."""

from __future__ import annotations

import json

import torch
from transformers import get_cosine_schedule_with_warmup

from sst_interp.train.config import TrainConfig
from sst_interp.train.optim import (
    build_optimizer,
    build_scheduler,
    group_lrs,
    optimizer_state_from_tensors,
    optimizer_state_to_tensors,
)


def _params(seed=0):
    g = torch.Generator().manual_seed(seed)
    lora = [torch.nn.Parameter(torch.randn(4, 3, generator=g)), torch.nn.Parameter(torch.randn(5, generator=g))]
    sst = [torch.nn.Parameter(torch.full((6,), -1.8)), torch.nn.Parameter(torch.ones(6))]
    return lora, sst


def test_paper_defaults():
    config = TrainConfig()
    assert (config.lora_r, config.lora_alpha, config.lora_dropout) == (64, 64.0, 0.05)
    assert (config.lr_lora, config.lr_sst, config.warmup_steps, config.weight_decay) == (1e-4, 1e-2, 10, 0.0)
    assert (config.max_grad_norm, config.micro_batch_size, config.grad_accum, config.patience) == (1.0, 1, 16, 4)
    assert (config.max_steps, config.max_seq_len) == (2000, 8192)
    assert set(config.lora_targets) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                                        "lm_head"}
    assert config.action_tokens == {"<execute>": 262140, "</execute>": 262141}


def test_lora_schedule_matches_transformers_and_sst_is_constant():
    config = TrainConfig(max_steps=40, warmup_steps=10)
    lora, sst = _params()
    optimizer = build_optimizer(lora, sst, config)
    scheduler = build_scheduler(optimizer, config)
    reference_opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-4)
    reference = get_cosine_schedule_with_warmup(reference_opt, num_warmup_steps=10, num_training_steps=40)
    for _ in range(40):
        lrs = group_lrs(optimizer)
        assert abs(lrs["lora"] - reference_opt.param_groups[0]["lr"]) < 1e-15
        assert lrs["sst"] == 1e-2
        optimizer.step()
        scheduler.step()
        reference_opt.step()
        reference.step()
    assert optimizer.param_groups[0]["betas"] == (0.9, 0.999) and optimizer.param_groups[0]["eps"] == 1e-8


def test_optimizer_state_round_trip_continues_identically():
    config = TrainConfig(max_steps=10, warmup_steps=2)

    def run(optimizer, scheduler, lora, sst, steps, seed):
        g = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            loss = sum((p * torch.randn(p.shape, generator=g)).sum() ** 2 for p in lora + sst)
            loss.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()

    lora, sst = _params()
    optimizer = build_optimizer(lora, sst, config)
    scheduler = build_scheduler(optimizer, config)
    run(optimizer, scheduler, lora, sst, 3, seed=1)
    tensors, meta = optimizer_state_to_tensors(optimizer)
    meta = json.loads(json.dumps(meta))  # must survive JSON
    sched_state = json.loads(json.dumps(scheduler.state_dict()))
    saved = [p.detach().clone() for p in lora + sst]
    run(optimizer, scheduler, lora, sst, 2, seed=2)
    expected = [p.detach().clone() for p in lora + sst]

    lora2, sst2 = _params()
    with torch.no_grad():
        for p, v in zip(lora2 + sst2, saved):
            p.copy_(v)
    optimizer2 = build_optimizer(lora2, sst2, config)
    scheduler2 = build_scheduler(optimizer2, config)
    optimizer_state_from_tensors(optimizer2, tensors, meta)
    scheduler2.load_state_dict(sched_state)
    run(optimizer2, scheduler2, lora2, sst2, 2, seed=2)
    for got, want in zip(lora2 + sst2, expected):
        assert torch.equal(got.detach(), want)
