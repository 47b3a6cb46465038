"""Depth-by-hop tables: exact-match counts of the answer per depth and hop count, their CSV file and Markdown.

``table[depth][hops] = (correct, total)``. Every organism's evaluation fills one (the looped organism's
:func:`~sst_interp.organism.looped.depth_by_hop`, the SST organism's in :mod:`sst_interp.train.organism`), so they
all print and store alike.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from sst_interp.organism.task import HopsQuestion

DepthByHop = dict[int, dict[int, tuple[int, int]]]


def tally_by_hop(questions: Sequence[HopsQuestion], predicted: Sequence[str]) -> dict[int, tuple[int, int]]:
    """``{hops: (correct, total)}`` of one depth's predicted answer tokens (one per question, in order)."""
    if len(questions) != len(predicted):
        raise ValueError(f"{len(predicted)} predictions for {len(questions)} questions")
    counts: dict[int, list[int]] = {}
    for question, token in zip(questions, predicted):
        cell = counts.setdefault(question.hops, [0, 0])
        cell[0] += int(token == question.answer)
        cell[1] += 1
    return {h: (c, n) for h, (c, n) in sorted(counts.items())}


def write_table(table: DepthByHop, path: Path) -> None:
    """``depth,hops,correct,total`` rows of a depth-by-hop table."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(("depth", "hops", "correct", "total"))
        for depth, row in table.items():
            for hops, (correct, total) in row.items():
                writer.writerow((depth, hops, correct, total))


def read_table(path: Path) -> DepthByHop:
    """The table :func:`write_table` wrote."""
    table: DepthByHop = {}
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            table.setdefault(int(row["depth"]), {})[int(row["hops"])] = (int(row["correct"]), int(row["total"]))
    return table


def format_table(table: DepthByHop) -> str:
    """The table as Markdown: one row per depth, one column per hop count, accuracy and counts."""
    hops = sorted({h for row in table.values() for h in row})
    lines = ["| depth | " + " | ".join(f"h={h}" for h in hops) + " |", "|---|" + "---|" * len(hops)]
    for depth, row in table.items():
        cells = [f"{row[h][0] / row[h][1]:.3f} ({row[h][0]}/{row[h][1]})" for h in hops]
        lines.append(f"| {depth} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
