"""Procedural training data for ``--demo``, from the demo task family (:mod:`sst_interp.data.demo`).

The recorder's demo questions are plain arithmetic lines that a base model continues (``"6 + 3 ="`` -> ``" 9"``), so
the demo trains on the same form: ``{"prompt": "6 + 3 =", "completion": " 9\\n", "question": "6 + 3 ="}`` rows (the completion is the
model turn; the newline is the demo's stop string). Items come from :func:`sst_interp.data.demo.make_item` with seeds
other than the evaluation seed, and any item whose question text is among the first ``exclude`` evaluation items
(``demo_items(exclude, DEFAULT_SEED, level)``) is skipped, so the demo never trains on the questions it is recorded on.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from sst_interp.data.demo import DEFAULT_LEVEL, DEFAULT_SEED, FAMILIES, demo_items, make_item
from sst_interp.data.prompts import demo_prompt
from sst_interp.kernels.errors import UsageError

TRAIN_SEED = 101
VAL_SEED = 202
EXCLUDE_EVAL = 256


def demo_rows(n: int, seed: int, level: int = DEFAULT_LEVEL, exclude: int = EXCLUDE_EVAL,
              avoid: set[str] | None = None) -> list[dict[str, str]]:
    """``n`` prompt/completion rows, cycling through the demo families, none of them an evaluation question.

    Args:
        n: rows to make.
        seed: generator seed (item ``i`` is drawn from ``random.Random(seed * 1_000_003 + i)``).
        level: demo difficulty level.
        exclude: how many evaluation items (seed ``DEFAULT_SEED``) to keep out.
        avoid: further question texts to keep out (e.g. the training texts when making validation rows).
    """
    if seed == DEFAULT_SEED:
        raise UsageError(f"seed {DEFAULT_SEED} is the evaluation seed of the demo set; use another")
    banned = {item.text for item in demo_items(exclude, DEFAULT_SEED, level)} | set(avoid or ())
    rows: list[dict[str, str]] = []
    seen: set[str] = set()
    i = 0
    while len(rows) < n:
        if i > 100 * (n + 10):
            raise UsageError(f"could not draw {n} distinct demo items at level {level}; ask for fewer")
        item = make_item(FAMILIES[i % len(FAMILIES)], random.Random(seed * 1_000_003 + i), level)
        i += 1
        if item.text in banned or item.text in seen:
            continue
        seen.add(item.text)
        rows.append({"prompt": demo_prompt(item.text), "completion": f" {item.answer}\n", "question": item.text})
    return rows


def write_demo_data(folder: str | Path, n_train: int = 256, n_val: int = 24, level: int = DEFAULT_LEVEL) -> tuple[Path, Path]:
    """Write ``train.jsonl`` and ``val.jsonl`` of demo rows into ``folder``; returns their paths.

    Validation rows share no question with the training rows or the evaluation items.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    train = demo_rows(n_train, TRAIN_SEED, level)
    val = demo_rows(n_val, VAL_SEED, level, avoid={row["question"] for row in train})
    paths = []
    for name, rows in (("train.jsonl", train), ("val.jsonl", val)):
        path = folder / name
        # written under a temporary name and renamed: the processes of a data-parallel run each write the same
        # file, and none may read another's half-written copy
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        tmp.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        os.replace(tmp, path)
        paths.append(path)
    return paths[0], paths[1]
