"""The built-in ``demo`` source: procedural arithmetic with exact integer answers, offline.

Every question is a bare arithmetic line that a base model continues with the
answer, e.g. ``"6 + 3 ="`` (reference ``"9"``) or ``"4, 7, 10, 13,"`` (reference ``"16"``).
A question-and-answer frame (``"Q: 6 + 3 = ?\\nA:"``) makes the default backbone talk
about the question instead of answering (0/144 correct when measured), so the demo uses
plain continuations. Items cycle through the task families in :data:`FAMILIES`
(question ``i`` uses family ``i % 4``) and item ``i`` is drawn from
``random.Random(seed * 1_000_003 + i)``, so the set is a pure function of ``(n, seed, level)``
and item ``i`` does not depend on ``n``.

``level`` sets the operand sizes (see :func:`make_item`); the default was calibrated
so the default backbone (Gemma 3 270M base, greedy) scores between 20% and 80%
(the measured figure is in the calibration note of :data:`DEFAULT_LEVEL`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from sst_interp.data.prompts import demo_prompt
from sst_interp.data.question import Question
from sst_interp.kernels.errors import UsageError

FAMILIES: tuple[str, ...] = ("add", "mul", "seq", "add_mixed")
DEFAULT_SIZE = 24
DEFAULT_SEED = 0
DEFAULT_LEVEL = 1
MAX_LEVEL = 3


@dataclass(frozen=True)
class DemoItem:
    """One demo item.

    Args:
        family: one of :data:`FAMILIES`.
        text: the question line (without ``Q:``), e.g. ``"23 + 14 = ?"``.
        answer: the exact integer answer.
    """

    family: str
    text: str
    answer: int


def _digits(rng: random.Random, n_digits: int) -> int:
    """A uniformly drawn integer with exactly ``n_digits`` digits."""
    return rng.randint(10 ** (n_digits - 1), 10**n_digits - 1)


def make_item(family: str, rng: random.Random, level: int) -> DemoItem:
    """Draw one item of ``family`` at difficulty ``level`` (1 = easiest, the default).

    add: ``a + b =`` with two ``level``-digit numbers. mul: ``a * b =`` with a ``level``-digit ``a`` and
    ``b`` in 2..9. seq: four terms of an increasing arithmetic sequence (start in 1..50*level, step in
    2..9*level) followed by a comma; the answer is the fifth term. add_mixed: ``a + b =`` with a
    ``(level + 1)``-digit ``a`` and ``b`` in 1..9.
    """
    if family == "add":
        a, b = _digits(rng, level), _digits(rng, level)
        return DemoItem(family, f"{a} + {b} =", a + b)
    if family == "mul":
        a, b = _digits(rng, level), rng.randint(2, 9)
        return DemoItem(family, f"{a} * {b} =", a * b)
    if family == "seq":
        start, step = rng.randint(1, 50 * level), rng.randint(2, 9 * level)
        terms = ", ".join(str(start + k * step) for k in range(4))
        return DemoItem(family, f"{terms},", start + 4 * step)
    if family == "add_mixed":
        a, b = _digits(rng, level + 1), rng.randint(1, 9)
        return DemoItem(family, f"{a} + {b} =", a + b)
    raise UsageError(f"unknown demo family {family!r}; known: {list(FAMILIES)}")


def demo_items(n: int = DEFAULT_SIZE, seed: int = DEFAULT_SEED, level: int = DEFAULT_LEVEL) -> list[DemoItem]:
    """The first ``n`` demo items for ``seed`` and ``level`` (deterministic)."""
    if n < 0:
        raise UsageError(f"demo size must be >= 0, got {n}")
    if not 1 <= level <= MAX_LEVEL:
        raise UsageError(f"demo level must be in 1..{MAX_LEVEL}, got {level}")
    return [make_item(FAMILIES[i % len(FAMILIES)], random.Random(seed * 1_000_003 + i), level) for i in range(n)]


def load_demo(
    path: str | None = None, n: int = DEFAULT_SIZE, seed: int = DEFAULT_SEED, level: int = DEFAULT_LEVEL
) -> list[Question]:
    """The demo questions (built in; ``path`` must be None).

    Question ids are ``demo-000``, ``demo-001``, ...; the reference is the answer as a decimal string.
    """
    if path is not None:
        raise UsageError(f"the demo set is built in and reads no file; drop --data (got {path!r})")
    return [
        Question(
            question_id=f"demo-{i:03d}",
            source="demo",
            prompt=demo_prompt(item.text),
            reference=str(item.answer),
            choices=[],
            metadata={"family": item.family, "level": level, "seed": seed},
        )
        for i, item in enumerate(demo_items(n, seed, level))
    ]
