"""Disk-space estimate: a hand-computed case, the free-space comparison, and agreement with real shard sizes."""

from __future__ import annotations

import shutil
from collections import namedtuple

import numpy as np

from sst_interp.store import Run, RunWriter, bytes_per_question, estimate, estimate_remaining


def test_bytes_per_question_hand_computed() -> None:
    # full=2 positions, sketched=min(2+3, 4)-2=2 positions; per iteration:
    #   full 2*2*(4*4+24)=160, sketch 2*2*(1*2+24)=104 (uint16 indices, d < 65536), logits 4*(2*12+8+24)=224 -> 488
    # generation rows 4*4+512=528 per depth; 3 tables x 4096 fixed per depth;
    # depths 1 and 2 -> (488+528+12288) + (2*488+528+12288) = 27096
    got = bytes_per_question(depths=[1, 2], full_positions=2, sketch_positions=3, layers=2, d=4, dtype="float32",
                             top_k=2, sketch_k=1, max_new_tokens=4)
    assert got == 27096
    # d >= 65536: int32 indices, 2 more bytes per index: 2 sketched positions x 2 layers x (1 + 2) iterations x 2 B
    # per index of the sketch (the difference of differences cancels the full position's extra dimension)
    sizes = dict(depths=[1, 2], full_positions=2, sketch_positions=3, layers=2, dtype="float32", top_k=0,
                 max_new_tokens=4)

    def wider(sketch_k: int) -> int:
        return bytes_per_question(d=65536, sketch_k=sketch_k, **sizes) - bytes_per_question(d=65535, sketch_k=sketch_k,
                                                                                          **sizes)

    assert wider(5) - wider(0) == 5 * (2 * 2 * 3 * 2)
    half = bytes_per_question(depths=[1], full_positions=1, sketch_positions=0, layers=1, d=1000, dtype="bfloat16",
                              top_k=1, sketch_k=1, max_new_tokens=1)
    assert half == 1 * (1000 * 2 + 24) + (12 + 8 + 24) + (4 + 512) + 3 * 4096


def test_attention_adds_its_rows_at_the_full_positions() -> None:
    # 2 full positions x (1 + 2) iterations x 6 rows (layers x heads) x (10 keys x 8 B + 4 + 24), one more table
    sizes = dict(depths=[1, 2], full_positions=2, sketch_positions=3, layers=2, d=4, dtype="float32", top_k=2,
                 sketch_k=1, max_new_tokens=4)
    extra = bytes_per_question(**sizes, attention_rows=6, attention_keys=10) - bytes_per_question(**sizes)
    assert extra == 2 * 3 * 6 * (10 * 8 + 4 + 24) + 2 * 4096


def test_estimate_compares_with_free_space(tmp_path, monkeypatch) -> None:
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 0, 20_000))
    sizes = dict(depths=[1], full_positions=1, sketch_positions=0, layers=1, d=1000, dtype="float32", top_k=1,
                 sketch_k=1, max_new_tokens=1)
    small = estimate(tmp_path / "not" / "yet", questions=1, **sizes)
    assert small.fits and small.free_bytes == 20_000 and "free" in small.line()
    big = estimate(tmp_path, questions=10, **sizes)
    assert not big.fits and "NOT ENOUGH SPACE" in big.line()


def test_estimate_bounds_real_hidden_dominated_run(tmp_path, run_settings) -> None:
    d, layers, positions, depth, n_q = 512, 4, 5, 2, 3
    extra = dict(run_settings["extra"](), hidden_size=d, num_layers=layers, depths=[depth])
    rng = np.random.default_rng(0)
    path = tmp_path / "run"
    with RunWriter.create_or_resume(path, run_settings["identity"], extra) as writer:
        for q in range(n_q):
            grid = np.array([(p, i, layer) for p in range(positions) for i in range(1, depth + 1)
                             for layer in range(layers)])
            n = len(grid)
            writer.submit(depth, [f"q{q}"], hidden={
                "question_id": np.array([f"q{q}"] * n), "turn": np.zeros(n), "position": grid[:, 0],
                "iteration": grid[:, 1], "layer": grid[:, 2],
                "values": rng.standard_normal((n, d)).astype(np.float32)})
    run = Run.open(path)
    actual = sum(s["bytes"] for b in run.manifest["batches"][str(depth)] for s in b["shards"].values())
    predicted = n_q * bytes_per_question(depths=[depth], full_positions=positions, sketch_positions=0,
                                         layers=layers, d=d, dtype="float32", top_k=0, sketch_k=0,
                                         max_new_tokens=positions)
    assert actual <= predicted <= 1.25 * actual


def test_estimate_remaining_sums_depths(tmp_path) -> None:
    sizes = dict(full_positions=2, sketch_positions=3, layers=2, d=4, dtype="float32", top_k=2, sketch_k=1,
                 max_new_tokens=4)
    one = bytes_per_question(depths=[1], **sizes)
    two = bytes_per_question(depths=[2], **sizes)
    est = estimate_remaining(tmp_path, {1: 3, 2: 0}, **sizes)
    assert est.total_bytes == 3 * one and est.bytes_per_question == one + two == 27096
