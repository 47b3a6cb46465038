"""Cost of an intervened record against the clean record of the same shape, side by side in one run.

Run: ``python bench/bench_intervention.py [--model default|tiny|PATH] [--questions 8] [--depth 2] [--new-tokens 16]
[--repeats 3] [--spec freeze|add|zero]``

Each repeat records the same questions twice with ``record``'s own :func:`~sst_interp.record.runner.record_questions`
(a fresh run directory each time, the writer included): clean, then with the spec (the order alternates between
repeats, so load drift hits both alike). The specs are those of the experiments: ``freeze`` (experiment a's window
over the lowest third of the layers at iterations 1..k-1), ``add`` (experiment c: a direction added to one layer's
output at iterations 2..k) and ``zero`` (``state_in`` zeroed everywhere at iterations 2..k: every stateful layer
and pass goes through the intervention). Printed: the median wall time of each and the ratio intervened / clean
(goal <= 1.05). On a shared CPU machine run with OMP_NUM_THREADS=1.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from sst_interp.data import load_questions
from sst_interp.interventions import Intervention, InterventionSpec, Operation, Site
from sst_interp.model import SSTConfig, SSTModel
from sst_interp.model.backbone import load_backbone
from sst_interp.record.options import RecordOptions
from sst_interp.record.runner import record_questions


def build(model: str):
    """(sst, tokenizer): ``tiny`` is a random 3-layer Gemma 3 with a character tokenizer."""
    if model == "tiny":
        from sst_interp.model.testing import char_tokenizer, tiny_gemma3

        backbone, tokenizer = tiny_gemma3(dtype=torch.float32), char_tokenizer()
    else:
        backbone, tokenizer = load_backbone(model, dtype="float32")
    return SSTModel.from_backbone(backbone, SSTConfig(state_scale="hidden")), tokenizer


def make_spec(kind: str, num_layers: int, hidden_size: int, depth: int, folder: Path) -> InterventionSpec:
    """The intervention measured (see the module docstring)."""
    if kind == "freeze":
        site = Site("layer_out", layers=tuple(range(max(1, num_layers // 3))), iterations=tuple(range(1, depth)))
        return InterventionSpec((Intervention(site, Operation("freeze")),))
    if kind == "add":
        direction = folder / "direction.npy"
        np.save(direction, np.random.default_rng(0).standard_normal(hidden_size).astype(np.float32))
        site = Site("layer_out", layers=(num_layers // 2,), iterations=tuple(range(2, depth + 1)))
        return InterventionSpec((Intervention(site, Operation("add", scale=0.5, direction_file=str(direction))),))
    site = Site("state_in", iterations=tuple(range(2, depth + 1)))
    return InterventionSpec((Intervention(site, Operation("zero")),))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--spec", choices=("freeze", "add", "zero"), default="freeze")
    args = parser.parse_args()
    sst, tokenizer = build(args.model)
    questions = load_questions("demo", None)[: args.questions]
    root = Path(tempfile.mkdtemp(prefix="bench_intervention_"))
    spec_file = root / "spec.json"
    spec_file.write_text(make_spec(args.spec, sst.num_layers, sst.hidden_size, args.depth, root).to_json())
    times: dict[str, list[float]] = {"clean": [], "intervened": []}

    def once(name: str, number: int) -> None:
        options = RecordOptions(questions="demo", depths=[args.depth], max_new_tokens=args.new_tokens,
                             batch_size=args.questions, device="cpu", dtype="float32", prompt_mode="none",
                             sketch_positions=64, intervention=str(spec_file) if name == "intervened" else None)
        out = root / f"{name}-{number}"
        started = time.perf_counter()
        record_questions(sst, tokenizer, questions, options, out)
        if number >= 0:  # the warm-up counts for neither
            times[name].append(time.perf_counter() - started)
        shutil.rmtree(out)

    try:
        once("clean", -1)  # warm-up: first-call costs (allocations, file cache) count for neither
        for number in range(args.repeats):
            order = ("clean", "intervened") if number % 2 == 0 else ("intervened", "clean")
            for name in order:
                once(name, number)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    clean, intervened = statistics.median(times["clean"]), statistics.median(times["intervened"])
    print(f"model {args.model}, {args.questions} questions, depth {args.depth}, {args.new_tokens} new tokens, "
          f"spec {args.spec}, {args.repeats} repeats")
    print(f"clean record       {clean:8.2f} s (median; all: {', '.join(f'{t:.2f}' for t in times['clean'])})")
    print(f"intervened record  {intervened:8.2f} s (median; all: "
          f"{', '.join(f'{t:.2f}' for t in times['intervened'])})")
    print(f"ratio intervened / clean: {intervened / clean:.3f} (goal <= 1.05)")


if __name__ == "__main__":
    main()
