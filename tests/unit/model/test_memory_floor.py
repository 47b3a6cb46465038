"""The memory floor's arithmetic (sst_interp.model.memory_floor, issue 48): the bytes a decode step reads, counted
from the model's parameters, equal the same bytes worked out from the architecture's sizes; the bandwidth, floor
ratios, goal line and break-even follow from made-up clocks and byte counts. Nothing here is timed."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from transformers import Gemma3ForCausalLM

from sst_interp.model import SSTConfig, SSTModel
from sst_interp.model.memory_floor import (
    Bandwidth,
    DecodeBytes,
    FloorRow,
    break_even_steps,
    decode_bytes,
    floor_goal,
    floor_ratio,
    format_floor_table,
    format_ratio,
    format_steps,
    goal_line,
    probe_bandwidth,
)
from sst_interp.model.paper_shape import gemma3_27b_text_config, parameter_count
from sst_interp.model.testing import tiny_gemma3, tiny_llama


def _gemma3_layer_parameters(d: int, heads: int, kv: int, head_dim: int, ffn: int) -> int:
    """One Gemma 3 layer from its sizes: q/k/v/o, q/k norms, four sandwich norms, the gated MLP."""
    return d * heads * head_dim * 2 + d * kv * head_dim * 2 + 2 * head_dim + 4 * d + 3 * d * ffn


def test_a_tiny_gemma3_step_reads_its_layers_per_pass_and_its_tied_head_once():
    model = tiny_gemma3(num_layers=3, hidden_size=32, vocab_size=128, dtype=torch.float64)
    d, layers, vocab, double = 32, 3, 128, 8
    # tiny sizes (sst_interp.model.testing): 2 heads, 1 KV head, head_dim d / 2, MLP 2 d
    per_pass = (layers * _gemma3_layer_parameters(d, 2, 1, d // 2, 2 * d) + d) * double  # layers + final norm
    head = vocab * d * double
    reads = decode_bytes(model)
    assert reads == DecodeBytes(per_pass=per_pass, head=head, embedding_row=d * double)
    # the head is tied to the embedding: one pass with logits reads every parameter once, plus one embedding row
    assert reads.step() == sum(p.nbytes for p in model.parameters()) + d * double  # parameters(): tied once
    # depth 4, logits after the last pass only, batch 8: four passes of the layers, one head, eight rows
    assert reads.step(4, 1, 8) == 4 * per_pass + head + 8 * d * double
    assert reads.step(4, 4, 1) == 4 * per_pass + 4 * head + d * double


def test_an_untied_head_is_read_and_the_embedding_table_is_not():
    model = tiny_llama(num_layers=2, hidden_size=32, vocab_size=128, dtype=torch.float32)
    assert not model.config.tie_word_embeddings
    reads = decode_bytes(model)
    table = 128 * 32 * 4
    assert reads.head == table
    assert reads.per_pass + reads.head + table == sum(p.numel() * p.element_size() for p in model.parameters())


def test_the_sst_state_stream_parameters_are_read_every_pass():
    backbone = tiny_gemma3(dtype=torch.float64)
    before = decode_bytes(backbone)
    sst = SSTModel.from_backbone(backbone, SSTConfig())
    state = sum(p.numel() * p.element_size() for p in sst.state_parameters())
    assert state > 0
    assert decode_bytes(sst) == DecodeBytes(before.per_pass + state, before.head, before.embedding_row)


def test_the_27b_shape_reads_its_published_parameter_count_in_bf16():
    config = gemma3_27b_text_config()
    with torch.device("meta"):
        model = Gemma3ForCausalLM(config).to(torch.bfloat16)
    reads = decode_bytes(model)
    assert reads.step(rows=1) - reads.embedding_row == 2 * parameter_count(config) == 54_018_692_608


def test_step_refuses_impossible_pass_counts():
    reads = DecodeBytes(10, 5, 1)
    for passes, head_passes, rows in ((0, 0, 1), (2, 3, 1), (1, 1, 0), (1, -1, 1)):
        with pytest.raises(ValueError):
            reads.step(passes, head_passes, rows)
    assert reads.step(3, 0, 2) == 32


def test_the_probe_takes_the_fastest_repeat_of_a_made_up_clock():
    ticks = iter([0.0, 0.25, 10.0, 10.125, 20.0, 20.5])  # exact in binary
    bandwidth = probe_bandwidth(4096, "cpu", repeats=3, clock=lambda: next(ticks))
    assert (bandwidth.probe_bytes, bandwidth.seconds, bandwidth.device) == (4096, 0.125, "cpu")
    assert bandwidth.threads == torch.get_num_threads()
    assert bandwidth.bytes_per_s == 4096 / 0.125
    assert bandwidth.floor_s(8192) == 0.25
    # the probe reads at most the cap, however large the step
    ticks = itertools.count()
    assert probe_bandwidth(10**12, "cpu", repeats=1, cap=1024, clock=lambda: next(ticks)).probe_bytes == 1024


def test_the_issue_figures_give_the_issue_ratios():
    # issue 48: 1.07 GB read in 46.9 ms is the floor; eager 55.8 ms and compiled 46.8 ms per token
    bandwidth = Bandwidth(probe_bytes=1_070_000_000, seconds=0.0469, threads=2, device="cpu", machine="m")
    floor = bandwidth.floor_s(1_070_000_000)
    assert floor == pytest.approx(0.0469)
    assert format_ratio(floor_ratio(0.0558, floor)) == "1.19x"
    assert format_ratio(floor_ratio(0.0468, floor)) == "1.00x"
    assert bandwidth.describe() == ("bandwidth 22.8 GB/s (sum of 1.07 GB float32 in 46.90 ms, fastest repeat; "
                                    "2 threads; m)")
    assert math.isnan(floor_ratio(-1.0, floor)) and math.isnan(floor_ratio(0.05, 0.0))
    assert format_ratio(math.nan) == "-"


def test_the_goal_line_names_the_worst_compiled_row_and_the_device_goal():
    assert (floor_goal("cpu"), floor_goal("cuda:0")) == (1.1, 1.25)
    assert goal_line({"plain": 1.00, "sst d1": 1.08}, "cpu") == \
        "compiled <= 1.1x the floor on the CPU: largest 1.08x (sst d1): met"
    assert goal_line({"plain": 1.00, "sst d1": 1.12}, "cpu") == \
        "compiled <= 1.1x the floor on the CPU: largest 1.12x (sst d1): NOT met"
    assert goal_line({"plain": 1.12, "record d4": math.nan}, "cuda") == \
        "compiled <= 1.25x the floor on a GPU: largest 1.12x (plain): met (record d4 not measured)"
    assert goal_line({"plain": math.nan}, "cpu") == \
        "compiled <= 1.1x the floor on the CPU: not measured (plain not measured)"


def test_break_even_is_compile_seconds_over_seconds_saved_per_step():
    assert break_even_steps(150.0, 0.0558, 0.0468) == pytest.approx(150.0 / 0.009)
    assert math.isinf(break_even_steps(150.0, 0.05, 0.05)) and math.isinf(break_even_steps(150.0, 0.04, 0.05))
    assert (format_steps(16666.7), format_steps(math.inf), format_steps(math.nan)) == ("16,667", "never", "-")
    assert math.isnan(FloorRow("eager only", 1, 0.01, 0.02).break_even)
    # a negative step time is noise larger than the steps timed, not a huge gain
    assert math.isnan(break_even_steps(150.0, 0.34, -0.19)) and math.isnan(break_even_steps(150.0, -0.04, 0.1))


def test_the_floor_table_from_made_up_clocks():
    rows = [FloorRow("b1 plain", 1_070_000_000, 0.0469, 0.0558, 0.0468, 150.0),
            FloorRow("b1 sst d4", 2_270_000_000, 0.0995, 0.3736, 0.1657),
            FloorRow("hf plain", 1_070_000_000, 0.0469, 0.0600)]
    assert [row.compiled_x for row in rows[:2]] == pytest.approx([0.0468 / 0.0469, 0.1657 / 0.0995])
    assert rows[1].speed_up == pytest.approx(0.3736 / 0.1657) and math.isnan(rows[2].speed_up)
    assert format_floor_table(rows).splitlines() == [
        "row        reads GB  floor ms  eager ms  compiled ms  eager/floor  compiled/floor  speed-up  break-even steps",
        "b1 plain      1.070      46.9      55.8         46.8        1.19x           1.00x     1.19x            16,667",
        "b1 sst d4     2.270      99.5     373.6        165.7        3.75x           1.67x     2.25x                 -",
        "hf plain      1.070      46.9      60.0            -        1.28x               -         -                 -"]


def test_bench_compile_states_the_break_even_range_per_batch():
    from bench.bench_compile import break_even_line

    rows = [FloorRow("b8 plain", 1, 0.01, 0.05, 0.03, 100.0), FloorRow("b8 sst d1", 1, 0.01, 0.05, 0.04, 100.0)]
    assert break_even_line(8, rows) == ("batch 8: compiling pays for itself after 5,000 (b8 plain) to 10,000 "
                                        "(b8 sst d1) decode steps (8 tokens each): compile seconds over the seconds "
                                        "saved per step, on this machine")
    assert break_even_line(1, [FloorRow("b1 plain", 1, 0.01, 0.05)]) == "batch 1: break-even not measured"
