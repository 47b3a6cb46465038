"""Split the 3-hop test questions of a ``train-sst`` folder by the order of their second and third bindings, and
count each checkpoint's exact answers at depth 1 in each part.

Why: a 2-layer model can chain two dependent attention reads at the answer position (two hops), and reach a third
hop only when the third binding (``a=7`` of ``c -> b -> a -> 7``) comes before the second (``b=a``), so that
``b=a``'s first layer can have read it; the split tests whether the organisms' 3-hop accuracy is that bound.

    python bench/organism/three_hop_order.py FOLDER      # FOLDER: written by python -m sst_interp.organism train-sst
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from sst_interp.organism.task import HopsQuestion, HopsSpec, split_items
from sst_interp.train.organism import BACKBONE_DIR, BASELINE_DIR, MARKER, SST_DIR, checkpoint_answers


def third_before_second(question: HopsQuestion) -> bool:
    """Whether the chain's third binding precedes its second in the prompt."""
    bindings = question.prompt.split()
    chain = question.chain
    return bindings.index(f"{chain[2]}={chain[3]}") < bindings.index(f"{chain[1]}={chain[2]}")


def main(folder: Path) -> None:
    torch.set_num_threads(1)
    marker = json.loads((folder / MARKER).read_text())
    questions = [q for q in split_items(HopsSpec(**marker["task"]), "test", marker["train"]["test_size"])
                 if q.hops == 3]
    print("| checkpoint | third binding first | second binding first |")
    print("|---|---|---|")
    for name in (SST_DIR, BASELINE_DIR):
        answers = checkpoint_answers(folder / BACKBONE_DIR, folder / name / "best", questions, [1])[1]
        cells = []
        for first in (True, False):
            hits = [a == q.answer for a, q in zip(answers, questions) if third_before_second(q) == first]
            cells.append(f"{sum(hits)}/{len(hits)}")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
