"""The overthinking organism's numbers, for docs/organism.md: the depth-by-hop table with 95% Wilson intervals, what
one H-cycle past the sufficient depth does to each answer (against the value the chain predicts), and the MUST HALT
count of a recorded run of 240 test questions as the halting probe's labels compute it.

    python bench/organism/overthink_table.py FOLDER [--n 3000] [--run RUN]

FOLDER: an organism trained with ``train --counted`` (or ``hops-overthink``). ``--n`` test questions (balanced over
hop counts) make the tables; ``--run`` is where ``record`` writes the 240-question run (default: a temporary
folder), recorded with ``python -m sst_interp.record --model FOLDER --questions hops --depths 1,...,5``, as a user
would, so that the MUST HALT count is the suite's own (:func:`sst_interp.probe.labels.labels_from_generations`).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
from transformers import HrmTextForCausalLM

from sst_interp.checkpoints import resolve_model
from sst_interp.cli.record import main as record_main
from sst_interp.kernels.stats import wilson_interval
from sst_interp.organism.carried import trained_spec
from sst_interp.organism.looped import answer_predictions
from sst_interp.organism.overshoot import overshoot_rows, overshoot_summary
from sst_interp.organism.tables import DepthByHop, tally_by_hop
from sst_interp.organism.task import split_items
from sst_interp.organism.tokenizer import hops_tokenizer
from sst_interp.probe.labels import labels_from_generations
from sst_interp.store import Run

DEPTHS = range(1, 6)


def format_with_intervals(table: DepthByHop) -> str:
    """The depth-by-hop table as Markdown, each cell its accuracy, 95% Wilson interval and counts."""
    hops = sorted({h for row in table.values() for h in row})
    lines = ["| depth | " + " | ".join(f"h={h}" for h in hops) + " |", "|---|" + "---|" * len(hops)]
    for depth, row in table.items():
        cells = []
        for h in hops:
            correct, total = row[h]
            interval = wilson_interval(correct, total)
            cells.append(f"{correct / total:.3f} [{interval.low:.2f}, {interval.high:.2f}] ({correct}/{total})")
        lines.append(f"| {depth} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def must_halt(run: Run) -> str:
    """MUST HALT timesteps and questions of a recorded run, by depth, from the suite's labels."""
    labels = labels_from_generations(run.generations())
    steps = labels.timesteps
    by_depth = steps[steps["must_halt"]].groupby("depth").size().to_dict()
    return (f"MUST HALT: {labels.n_must_halt} timesteps from {len(labels.must_halt_questions)} of "
            f"{len(labels.correct)} questions (by depth: {by_depth}); SAFE: {labels.n_safe}; recoverable: "
            f"{len(labels.recoverable_questions)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--run", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    folder = Path(resolve_model(args.folder))
    spec = trained_spec(folder)
    model = HrmTextForCausalLM.from_pretrained(folder).eval()
    tokenizer = hops_tokenizer()
    questions = split_items(spec, "test", args.n)
    answers = {depth: answer_predictions(model, tokenizer, questions, depth) for depth in DEPTHS}
    table = {depth: tally_by_hop(questions, answers[depth]) for depth in DEPTHS}
    print(f"depth-by-hop, {args.n} test questions ({spec}):\n")
    print(format_with_intervals(table))
    print("\none H-cycle past the sufficient depth ceil(k/2):\n")
    print("| hops | right at ceil(k/2) | can break (chain runs on) | break at +1 | landed on hop k+1 | on hop k+2 "
          "| as predicted | breaks where the chain ended |")
    print("|---|---|---|---|---|---|---|---|")
    summary = overshoot_summary(overshoot_rows(spec, questions, answers))
    for hops, cell in summary.items():
        print(f"| {hops} | {cell['right']} | {cell['can_break']} | {cell['breaks']} | {cell['plus_one']} | "
              f"{cell['plus_two']} | {cell['as_predicted']} | {cell['ended_breaks']} |")
    total = {key: sum(cell[key] for cell in summary.values()) for key in next(iter(summary.values()))}
    print(f"\nall: {json.dumps(total)}")
    with tempfile.TemporaryDirectory() as scratch:
        out = args.run or Path(scratch) / "run"
        assert record_main(["--model", str(folder), "--questions", "hops", "--depths", ",".join(map(str, DEPTHS)),
                            "--device", "cpu", "--threads", "1", "--out", str(out)]) == 0
        print("\n240 test questions, recorded at depths 1-5:", must_halt(Run.open(out)))


if __name__ == "__main__":
    main()
