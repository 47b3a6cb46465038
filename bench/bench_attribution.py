"""Cost of one attribution pass (forward with autograd, then backward) against one clean pass of the same batch,
and against real patching, which costs one forced generation per site.

Run: ``python bench/bench_attribution.py [--model default|tiny|PATH] [--questions 8] [--depth 2] [--position 3]
[--repeats 3] [--threads 1]``

The questions are recorded once at depths k and k+1 (``record``'s own runner, ``--full-positions`` covering
the target) as the reference run. Each row's target is depth k's token at ``--position``, the tokens before it
forced. Timed, each repeat alternating the order: the clean forced pass at depth k (no gradients), the attribution
pass at depth k (every layer x position <= target x iteration site,
:func:`~sst_interp.experiments.attribution.attribution_pass`) and the estimates from it (the patch: depth k+1's
state at each site, read from the run); and real patching of ``--real-sites`` sites, one forced generation each,
extrapolated to every site. Printed: medians and the ratio attribution / clean (goal <= 3). ``--threads`` sets
torch's intra-op threads (default 1: on a shared machine more threads than idle cores make every pass wait on the
slowest, for both sides of the ratio alike).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from sst_interp.data import load_questions
from sst_interp.experiments.attribution import attribution_pass, estimates, metric_values, site_spec
from sst_interp.experiments.trace import Target
from sst_interp.interventions import Operation
from sst_interp.model import SSTConfig, SSTModel
from sst_interp.model.backbone import load_backbone
from sst_interp.record.completion import batch_generation_config
from sst_interp.record.options import RecordOptions
from sst_interp.record.runner import record_questions
from sst_interp.store import Run


def build(model: str):
    """(sst, tokenizer): ``tiny`` is a random 3-layer Gemma 3 with a character tokenizer; else the backbone as an
    untrained SST with the hidden-scale state (the demo preset)."""
    if model == "tiny":
        from sst_interp.model.testing import char_tokenizer, tiny_gemma3

        backbone, tokenizer = tiny_gemma3(dtype=torch.float32), char_tokenizer()
    else:
        backbone, tokenizer = load_backbone(model, dtype="float32")
    return SSTModel.from_backbone(backbone, SSTConfig(state_scale="hidden")), tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--position", type=int, default=3, help="the target position (sites are positions 0..it)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--real-sites", type=int, default=3, help="real patching generations timed")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sst, tokenizer = build(args.model)
    questions = load_questions("demo", None)[: args.questions]
    options = RecordOptions(questions="demo", depths=[args.depth, args.depth + 1], max_new_tokens=args.position + 1,
                            batch_size=args.questions, device="cpu", dtype="float32", prompt_mode="none",
                            full_positions=args.position + 1, sketch_positions=0)
    config = batch_generation_config(sst, tokenizer, options)
    root = Path(tempfile.mkdtemp(prefix="bench_attribution_"))
    try:
        record_questions(sst, tokenizer, questions, options, root / "reference")
        rows = Run.open(root / "reference").generations()
        tokens = {(q, int(d)): list(t) for q, d, t in zip(rows["question_id"], rows["depth"], rows["token_ids"])}
        prompts = [list(tokenizer(q.prompt).input_ids) for q in questions]
        # a row is measured where both depths' answers reach the target position (the patch reads depth k+1 there)
        targets = [Target(q.question_id, args.position, int(tokens[(q.question_id, args.depth)][args.position]),
                          tuple(int(t) for t in tokens[(q.question_id, args.depth)][: args.position]))
                   if min(len(tokens[(q.question_id, d)]) for d in (args.depth, args.depth + 1)) > args.position
                   else None for q in questions]
        if all(t is None for t in targets):
            raise SystemExit(f"no question's answer reaches position {args.position}; lower --position")
        # one more iteration's state at each site: depth k+1's, read from the run
        reference = Operation("patch", run=str(root / "reference"), depth=args.depth + 1)
        times: dict[str, list[float]] = {"clean": [], "attribution": [], "estimates": [], "real": []}
        sites = 0

        def clean() -> None:
            started = time.perf_counter()
            metric_values(sst, prompts, targets, args.depth, config)
            times["clean"].append(time.perf_counter() - started)

        def attribute() -> None:
            nonlocal sites
            gradients = attribution_pass(sst, prompts, targets, args.depth, config)
            times["attribution"].append(gradients.seconds)
            started = time.perf_counter()
            estimates(gradients, reference, targets, sst)
            times["estimates"].append(time.perf_counter() - started)
            sites = len(gradients.grads)

        clean()  # warm-up: first-call costs count for neither
        attribute()
        for name in times:
            times[name].clear()
        for number in range(args.repeats):
            for step in ((clean, attribute) if number % 2 == 0 else (attribute, clean)):
                step()
        for number in range(args.real_sites):
            layer = (number * 7) % sst.num_layers
            started = time.perf_counter()
            metric_values(sst, prompts, targets, args.depth, config,
                          site_spec(reference, layer, args.position, args.depth), [t.question_id if t else None
                                                                                   for t in targets])
            times["real"].append(time.perf_counter() - started)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = {name: statistics.median(values) for name, values in times.items()}
    print(f"model {args.model}, {len(questions)} questions in one batch ({sum(t is not None for t in targets)} with a "
          f"target), depth {args.depth}, target position "
          f"{args.position}, {args.repeats} repeats; torch threads {torch.get_num_threads()}")
    print(f"sites (layer x position x iteration): {sites} = {sst.num_layers} x {args.position + 1} x {args.depth}")
    print(f"clean forced pass        {med['clean']:8.3f} s (median; all: "
          f"{', '.join(f'{t:.3f}' for t in times['clean'])})")
    print(f"attribution pass (f+b)   {med['attribution']:8.3f} s (median; all: "
          f"{', '.join(f'{t:.3f}' for t in times['attribution'])})")
    print(f"estimates from the run   {med['estimates']:8.3f} s (median)")
    print(f"ratio attribution / clean: {med['attribution'] / med['clean']:.2f} (goal <= 3); with the estimates: "
          f"{(med['attribution'] + med['estimates']) / med['clean']:.2f}")
    print(f"real patching: {med['real']:.3f} s per site (median of {args.real_sites}) x {sites} sites = "
          f"{med['real'] * sites:.1f} s, {med['real'] * sites / med['attribution']:.0f}x the attribution pass")


if __name__ == "__main__":
    main()
