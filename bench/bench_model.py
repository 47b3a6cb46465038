"""Per-token cost of SST decoding at depth k against plain Hugging Face decoding of the same backbone.

Run: ``python bench/bench_model.py [--new-tokens 32] [--repeats 3] [--dtypes float32,bfloat16] [--compile on|off]``

Everything is measured side by side in one run, interleaved (plain, depth 1..4, plain, ...) so load drift hits all
alike; the medians are compared. Printed per dtype:

- ``plain``: ms per generated token of ``model.generate`` (greedy, KV cache) on an unconverted copy of the backbone;
- ``head``: ms of one LM-head call on one position (the only extra an SST may add per iteration when recording);
- ``sst k``: ms per generated token of :func:`sst_interp.model.generate` at depth k (LM head after the last
  iteration only), and the ratio ``sst k / (k * plain)`` (the project's target: <= 1.10).

- ``plain compiled`` / ``sst k compiled`` (``--compile on``, the default): the same through the compiled decode step
  (:mod:`sst_interp.model.compiled`), compiled once per dtype and stream setting (2-3 minutes each on a CPU).

Every row is also stated against the machine's memory floor (issue 48): the bytes its step reads from the weights
(:func:`sst_interp.model.memory_floor.decode_bytes`: the decoder's weights once per pass, the LM head once) over the
bandwidth of a streaming read with the run's threads (:func:`~sst_interp.model.memory_floor.probe_bandwidth`, before
and after each dtype's rows, the faster kept). Goal: compiled at most 1.1x the floor on the CPU, 1.25x on a GPU; the
speed-up over eager is a column without a goal, and the break-even says after how many tokens compiling pays.

Per-token figures are decode steps only: ``(T(N tokens) - T(1 token)) / (N - 1)``, so the prompt pass is not
spread over the tokens. The prompt pass is reported on its own: the default ``two_pass`` prefill runs the prompt
twice by design (pass 1 without blend, pass 2 with it), ``none`` once.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from sst_interp.model import GenerationConfig, SSTConfig, SSTModel, generate
from sst_interp.model.backbone import load_backbone
from sst_interp.model.compiled import StepCompiler, generate_compiled
from sst_interp.model.memory_floor import FloorRow, decode_bytes, format_floor_table, goal_line, probe_bandwidth

PROMPT = "Question: A farmer has 17 sheep and buys 25 more. How many sheep does the farmer have now?\nAnswer:"


def time_call(fn, repeats: int = 1) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def bench_dtype(dtype: str, new_tokens: int, repeats: int, depths: list[int],
                compiled: bool) -> tuple[dict[str, float], list[FloorRow]]:
    """Medians in ms ({name: ms}) and the rows against the floor (seconds)."""
    plain, tokenizer = load_backbone("default", dtype=dtype)
    backbone, _ = load_backbone("default", dtype=dtype)
    sst = SSTModel.from_backbone(backbone, SSTConfig(state_scale="hidden"))
    ids = tokenizer(PROMPT).input_ids
    input_ids = torch.tensor([ids])

    def run_plain(n=new_tokens):
        with torch.no_grad():
            out = plain.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                                 max_new_tokens=n, min_new_tokens=n, pad_token_id=0)
        assert out.shape[1] == input_ids.shape[1] + n

    def run_sst(depth, n=new_tokens, mode="two_pass"):
        result = generate(sst, [ids], depth, GenerationConfig(max_new_tokens=n, prompt_mode=mode))
        assert len(result.token_ids[0]) == n

    hidden = torch.randn(1, 1, sst.hidden_size, dtype=sst.dtype)

    def run_head():
        with torch.no_grad():
            sst.lm_logits(hidden)

    reads, plain_reads = decode_bytes(sst), decode_bytes(plain)
    bandwidths = [probe_bandwidth(reads.step(), "cpu")]
    compilers: dict[str, StepCompiler] = {}
    compile_s: dict[str, float] = {}

    def run_compiled(name, depth, n=new_tokens):
        result = generate_compiled(sst, [ids], depth, GenerationConfig(max_new_tokens=n), compiler=compilers[name])
        assert len(result.token_ids[0]) == n

    if compiled:  # the plain step runs the SST's layers with the state stream off
        for name, stream in (("plain", False), ("sst", True)):
            compilers[name] = StepCompiler(sst, "default", stream=stream)
            compile_s[name] = time_call(lambda: run_compiled(name, 2, 3))

    run_plain(), run_sst(1), run_head()  # warm-up
    samples: dict[str, list[float]] = {"plain": [], "head": [], "prefill_plain": [], "prefill_two_pass": [],
                                       "prefill_none": []}
    samples.update({f"sst{k}": [] for k in depths})
    if compiled:
        samples.update({"plain_compiled": [], **{f"sst{k}_compiled": [] for k in depths}})
    steps = new_tokens - 1
    for _ in range(repeats):
        prefill_plain = time_call(lambda: run_plain(1))
        samples["prefill_plain"].append(prefill_plain)
        samples["plain"].append((time_call(run_plain) - prefill_plain) / steps)
        samples["head"].append(time_call(run_head, 20))
        samples["prefill_none"].append(time_call(lambda: run_sst(1, 1, "none")))
        for depth in depths:
            prefill = time_call(lambda: run_sst(depth, 1))
            if depth == 1:
                samples["prefill_two_pass"].append(prefill)
            samples[f"sst{depth}"].append((time_call(lambda: run_sst(depth)) - prefill) / steps)
        if compiled:
            for name, depth, key in [("plain", 1, "plain_compiled")] + [("sst", k, f"sst{k}_compiled")
                                                                         for k in depths]:
                first = time_call(lambda: run_compiled(name, depth, 1))
                samples[key].append((time_call(lambda: run_compiled(name, depth)) - first) / steps)
    bandwidths.append(probe_bandwidth(reads.step(), "cpu"))
    bandwidth = max(bandwidths, key=lambda b: b.bytes_per_s)
    result = {name: statistics.median(values) * 1000 for name, values in samples.items()}
    result["prompt_tokens"] = len(ids)
    print(f"\n[{dtype}] {bandwidth.describe()}; before the rows {bandwidths[0].bytes_per_s / 1e9:.1f}, after "
          f"{bandwidths[1].bytes_per_s / 1e9:.1f} GB/s; one step reads {reads.per_pass / 1e9:.3f} GB of decoder "
          f"weights per pass and {reads.head / 1e9:.3f} GB of LM head: floor of a plain step "
          f"{1000 * bandwidth.floor_s(reads.step()):.1f} ms")

    def row(label: str, passes: int, eager: str, fast: str, compiled_for: str) -> FloorRow:
        nbytes = (plain_reads if compiled_for == "plain" else reads).step(passes, 1)
        return FloorRow(label, nbytes, bandwidth.floor_s(nbytes), result[eager] / 1000,
                        result[fast] / 1000 if compiled else None, compile_s.get(compiled_for))

    rows = [row("plain (HF)", 1, "plain", "plain_compiled", "plain")]
    rows += [row(f"sst {k}", k, f"sst{k}", f"sst{k}_compiled", "sst") for k in depths]
    return result, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--depths", default="1,2,3,4")
    parser.add_argument("--compile", choices=("on", "off"), default="on",
                        help="also time the compiled decode step (2-3 minutes of compilation per dtype and step)")
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, {args.new_tokens} new tokens, "
          f"median of {args.repeats}")
    goals: dict[str, float] = {}
    for dtype in args.dtypes.split(","):
        ms, rows = bench_dtype(dtype, args.new_tokens, args.repeats, depths, args.compile == "on")
        print(f"\n[{dtype}] plain HF decoding: {ms['plain']:.1f} ms/token; LM head alone: {ms['head']:.1f} ms "
              f"({ms['head'] / ms['plain']:.0%} of a plain step)")
        print(f"prompt pass ({ms['prompt_tokens']} tokens, incl. first token): plain "
              f"{ms['prefill_plain']:.0f} ms, SST none {ms['prefill_none']:.0f} ms "
              f"({ms['prefill_none'] / ms['prefill_plain']:.2f}x), SST two_pass {ms['prefill_two_pass']:.0f} ms "
              f"({ms['prefill_two_pass'] / ms['prefill_plain']:.2f}x; two passes by design)")
        print("depth  ms/token  ratio to k x plain  (target <= 1.10)")
        for depth in depths:
            ratio = ms[f"sst{depth}"] / (depth * ms["plain"])
            print(f"{depth:>5}  {ms[f'sst{depth}']:8.1f}  {ratio:18.2f}")
        print("eager (plain: HF generate; sst k: the eager session) and compiled, ms per token and against the floor")
        print(format_floor_table(rows), flush=True)
        goals.update({f"{dtype} {row.name}": row.compiled_x for row in rows})
    print()
    print(goal_line(goals, "cpu"))


if __name__ == "__main__":
    main()
