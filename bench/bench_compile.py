"""Compiled against eager decoding on the CPU, side by side in one run (issue 35, item 7).

Run: ``python bench/bench_compile.py [--new-tokens 16] [--batches 1,8] [--depths 1,2,3,4] [--repeats 3]``

On the default backbone (float32), for each batch size, per generated token (decode steps only:
``(min T(N tokens) - min T(1 token)) / (N - 1)`` over ``--repeats`` interleaved runs, so neither the prompt nor the
compilation is spread over the tokens, and other work on a shared machine is filtered out as well as it can be):

- ``plain``: the backbone through the decode step with the state stream off, eager against compiled;
- ``sst dK``: :func:`sst_interp.model.generate` (the eager session) against
  :func:`sst_interp.model.compiled.generate_compiled` at depth K;
- ``record dK``: the same with ``record``'s capture (the Recorder; hooks when eager, the step's outputs when
  compiled) and its columns gathered, at depths 1 and max(--depths);
- ``intervene dK``: the same under an intervention, at depth max(--depths): ``add`` of a fixed random direction
  to every layer's output at iteration 1 and ``freeze`` of the middle layer from iteration 2 on (the Intervener's
  Python hooks when eager, :class:`~sst_interp.model.stream_edits.StreamEdits` filled per pass when compiled; the
  intervening step compiles its own graph).

Each row is also stated against the machine's memory floor (issue 48): the bytes the row's step reads from the
weights (:func:`sst_interp.model.memory_floor.decode_bytes`: the decoder's weights once per pass, the LM head once per
pass that computes logits) over the bandwidth a streaming read reaches on this machine with the run's threads
(:func:`~sst_interp.model.memory_floor.probe_bandwidth`, before and after each batch size's rows; the faster of
the two is used, so a probe slowed by other work cannot flatter the ratios). Goal: compiled at most 1.1x the floor
on the CPU (1.25x on a GPU). The speed-up over eager is a column with no goal: it measures how slow this CPU's eager
matrix-vector product is as much as how good the step is.

Each compilation (one step graph and one LM-head graph per batch size and stream setting, with a 3-token warm-up)
is timed once and printed; with the per-step gain over eager it gives each row's break-even: the decode steps after
which compiling has paid for itself (at batch 1, generated tokens). ``--compile auto`` stays eager on the CPU; the
break-even says from what run length ``--compile on`` pays on this machine.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import torch

from sst_interp.hooks import RecordConfig, Recorder
from sst_interp.interventions import Intervention, InterventionSpec, Operation, Site, intervene
from sst_interp.model import GenerationConfig, SSTConfig, SSTModel, generate
from sst_interp.model.backbone import load_backbone
from sst_interp.model.compiled import StepCompiler, generate_compiled
from sst_interp.model.memory_floor import (
    Bandwidth,
    FloorRow,
    decode_bytes,
    format_floor_table,
    format_steps,
    goal_line,
    probe_bandwidth,
)

PROMPT = "Question: A farmer has 17 sheep and buys 25 more. How many sheep does the farmer have now?\nAnswer:"
CAPTURE = RecordConfig(full_positions=10, sketch_positions=512, top_k=128)


def seconds(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def per_token_pair(eager: Callable[[int], object], fast: Callable[[int], object], new_tokens: int,
                   repeats: int) -> tuple[float, float]:
    """Seconds per decode step of each, (min T(N) - min T(1)) / (N - 1), the two interleaved run by run: on a shared
    machine other work only ever adds time, so the minimum of each is the least disturbed, and interleaving exposes
    both to the same drift."""
    times = {(name, n): [] for name in ("eager", "fast") for n in (1, new_tokens)}
    for _ in range(repeats):
        for n in (new_tokens, 1):
            for name, fn in (("eager", eager), ("fast", fast)):
                times[(name, n)].append(seconds(lambda: fn(n)))
    return tuple((min(times[(name, new_tokens)]) - min(times[(name, 1)])) / (new_tokens - 1)
                 for name in ("eager", "fast"))


def edit_spec(sst: SSTModel) -> InterventionSpec:
    """The ``intervene`` rows' spec: ``add`` of one fixed random direction (norm 1) to every layer's output at
    iteration 1, and ``freeze`` of the middle layer at iterations 2 and later."""
    direction = torch.randn(sst.hidden_size, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    direction = tuple((direction / direction.norm()).tolist())
    return InterventionSpec((
        Intervention(Site("layer_out", iterations=(1,)), Operation("add", direction=direction)),
        Intervention(Site("layer_out", layers=(sst.num_layers // 2,), iterations=tuple(range(2, 9))),
                     Operation("freeze")),
    ))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--depths", default="1,2,3,4")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    backbone, tokenizer = load_backbone("default", dtype="float32")
    sst = SSTModel.from_backbone(backbone, SSTConfig(state_scale="hidden"))
    ids = list(tokenizer(PROMPT).input_ids)
    reads = decode_bytes(sst)
    print(f"default backbone, float32, {torch.get_num_threads()} threads, torch {torch.__version__}; "
          f"{args.new_tokens} new tokens, ms per token (decode steps only)", flush=True)
    print(f"one decode step reads {reads.per_pass / 1e9:.3f} GB of decoder weights per pass and "
          f"{reads.head / 1e9:.3f} GB of LM head per pass with logits", flush=True)
    rows: list[tuple[int, FloorRow]] = []
    for batch in (int(b) for b in args.batches.split(",")):
        prompts = [ids] * batch
        bandwidths = [probe(reads.step(rows=batch))]
        plain_eager = StepCompiler(sst, None, stream=False)
        plain_compiled = StepCompiler(sst, "default", stream=False)
        sst_compiled = StepCompiler(sst, "default", capture_outputs=True)

        def decode(compiler, depth: int, n: int, record: bool = False, spec: InterventionSpec | None = None) -> None:
            config = GenerationConfig(max_new_tokens=n, logits_every_iteration=record, prompt_mode="none")
            names = [f"q{row}" for row in range(batch)]
            if spec is not None:
                with intervene(sst, spec) as intervener:
                    if compiler is None:
                        generate(sst, prompts, depth, config, observer=intervener)
                    else:
                        generate_compiled(sst, prompts, depth, config, observer=intervener, compiler=compiler)
            elif compiler is None:
                if record:
                    with Recorder.for_model(sst, names, CAPTURE) as recorder:
                        generate(sst, prompts, depth, config, observer=recorder)
                    recorder.columns()
                else:
                    generate(sst, prompts, depth, config)
            elif record:
                with Recorder.for_model(sst, names, CAPTURE, layer_hooks=False) as recorder:
                    generate_compiled(sst, prompts, depth, config, observer=recorder, compiler=compiler)
                recorder.columns()
            else:
                generate_compiled(sst, prompts, depth, config, compiler=compiler)

        spec = edit_spec(sst)
        compile_s: dict[str, float] = {}
        for name, compiler, edits in (("plain", plain_compiled, None), ("sst", sst_compiled, None),
                                      ("intervening", sst_compiled, spec)):
            compile_s[name] = seconds(lambda: decode(compiler, 2, 3, spec=edits))
            print(f"batch {batch}: compiling the {name} step and LM head (with a 3-token warm-up): "
                  f"{compile_s[name]:.1f} s", flush=True)

        measured: list[tuple[str, float, float, int, float]] = []

        def compare(label: str, eager: Callable[[int], None], fast: Callable[[int], None], step_bytes: int,
                    compiled_for: str) -> None:
            eager(2), fast(2)  # warm
            slow_s, fast_s = per_token_pair(eager, fast, args.new_tokens, args.repeats)
            measured.append((label, slow_s, fast_s, step_bytes, compile_s[compiled_for]))
            print(f"b{batch} {label:<14} eager {1000 * slow_s:8.1f}  compiled {1000 * fast_s:8.1f}  speed-up "
                  f"{slow_s / fast_s:5.2f}x", flush=True)

        compare("plain", lambda n: decode(plain_eager, 1, n), lambda n: decode(plain_compiled, 1, n),
                reads.step(1, 1, batch), "plain")
        for depth in depths:
            compare(f"sst d{depth}", lambda n, d=depth: decode(None, d, n),
                    lambda n, d=depth: decode(sst_compiled, d, n), reads.step(depth, 1, batch), "sst")
        for depth in sorted({depths[0], depths[-1]}):
            # logits at every iteration: the head is read once per pass
            compare(f"record d{depth}", lambda n, d=depth: decode(None, d, n, record=True),
                    lambda n, d=depth: decode(sst_compiled, d, n, record=True), reads.step(depth, depth, batch),
                    "sst")
        compare(f"intervene d{depths[-1]}", lambda n: decode(None, depths[-1], n, spec=spec),
                lambda n: decode(sst_compiled, depths[-1], n, spec=spec), reads.step(depths[-1], 1, batch),
                "intervening")
        bandwidths.append(probe(reads.step(rows=batch)))
        bandwidth = max(bandwidths, key=lambda b: b.bytes_per_s)
        print(f"\nbatch {batch}: {bandwidth.describe()}; before the rows "
              f"{bandwidths[0].bytes_per_s / 1e9:.1f}, after {bandwidths[1].bytes_per_s / 1e9:.1f} GB/s; "
              f"floor of the plain step {1000 * bandwidth.floor_s(reads.step(rows=batch)):.1f} ms")
        batch_rows = [FloorRow(f"b{batch} {label}", nbytes, bandwidth.floor_s(nbytes), slow_s, fast_s, compiled)
                      for label, slow_s, fast_s, nbytes, compiled in measured]
        rows.extend((batch, row) for row in batch_rows)
        print(format_floor_table(batch_rows), flush=True)
    print()
    print(goal_line({row.name: row.compiled_x for _, row in rows}, "cpu"))
    for batch in sorted({batch for batch, _ in rows}):
        print(break_even_line(batch, [row for b, row in rows if b == batch]))


def probe(nbytes: int) -> Bandwidth:
    """The machine's streaming-read bandwidth over the bytes of one plain step, with the run's threads."""
    return probe_bandwidth(nbytes, "cpu")


def break_even_line(batch: int, rows: list[FloorRow]) -> str:
    """``--compile on`` pays for itself after this many decode steps at ``batch`` (the rows' range)."""
    known = [row for row in rows if not math.isnan(row.break_even)]
    if not known:
        return f"batch {batch}: break-even not measured"
    low, high = min(known, key=lambda r: r.break_even), max(known, key=lambda r: r.break_even)
    tokens = "" if batch == 1 else f" ({batch} tokens each)"
    return (f"batch {batch}: compiling pays for itself after {format_steps(low.break_even)} ({low.name}) to "
            f"{format_steps(high.break_even)} ({high.name}) decode steps{tokens}: compile seconds over the "
            f"seconds saved per step, on this machine")


if __name__ == "__main__":
    main()
