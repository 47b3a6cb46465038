"""What iterating past the sufficient depth does to a counted-hops answer, against what the task says it would.

A counted question (``?3c``) is answered at its sufficient depth ``c = ceil(hops / 2)``; an organism trained there
and never deeper has nothing that stops it, so one more H-cycle may move the answer further along the chain. The
task knows, per question, what that would give: the value one or two hops past the answer
(:meth:`~sst_interp.organism.task.HopsQuestion.overshoot`), and nothing new when the chain ends at the answer
(``beyond == 0``: a digit binds nothing). :func:`overshoot_rows` reads which hop of its own chain each answer is,
at ``c`` and at ``c + 1``; :func:`overshoot_summary` counts, per hop count, the answers right at ``c`` that break
at ``c + 1`` and how many of those landed where the chain predicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sst_interp.organism.task import HopsQuestion, HopsSpec


@dataclass(frozen=True)
class OvershootRow:
    """One question at its sufficient depth and one H-cycle deeper.

    Args:
        hops: the counted hop count k.
        beyond: bindings its chain runs past the answer (0: the answer is the chain's digit).
        depth: the sufficient depth ``ceil(k / 2)``.
        at_depth: the hop of the question's chain the answer at ``depth`` is (None: no value of the chain).
        deeper: the same at ``depth + 1``.
    """

    hops: int
    beyond: int
    depth: int
    at_depth: int | None
    deeper: int | None

    @property
    def right(self) -> bool:
        """Answered right at the sufficient depth."""
        return self.at_depth == self.hops

    @property
    def breaks(self) -> bool:
        """Right at the sufficient depth and wrong one H-cycle deeper (a MUST HALT question, when ``depth`` is also
        its first passing depth)."""
        return self.right and self.deeper != self.hops

    @property
    def as_predicted(self) -> bool:
        """A break that landed one or two hops further along the chain (stopping at its digit): the value an
        iteration that kept following the chain gives."""
        end = self.hops + self.beyond
        return self.breaks and self.deeper in {min(self.hops + 1, end), min(self.hops + 2, end)}


def hop_of(question: HopsQuestion, token: str) -> int | None:
    """Which hop of ``question``'s chain ``token`` is (its values are distinct), None when it is none of them."""
    return question.chain.index(token) if token in question.chain else None


def overshoot_rows(spec: HopsSpec, questions: Sequence[HopsQuestion],
                   answers: Mapping[int, Sequence[str]]) -> list[OvershootRow]:
    """One row per question whose sufficient depth and the depth after it are both in ``answers``.

    Args:
        spec: the counted spec the questions were drawn from (its sufficient depths).
        questions: counted questions.
        answers: ``depth -> the answer token of each question`` (in ``questions``' order).
    """
    rows = []
    for index, question in enumerate(questions):
        depth = spec.depth_of(question.hops)
        if depth in answers and depth + 1 in answers:
            rows.append(OvershootRow(question.hops, question.beyond, depth, hop_of(question, answers[depth][index]),
                                     hop_of(question, answers[depth + 1][index])))
    return rows


def overshoot_summary(rows: Sequence[OvershootRow]) -> dict[int, dict[str, int]]:
    """Per hop count: ``right`` (at the sufficient depth), ``breaks`` (of those, wrong one H-cycle deeper),
    ``as_predicted`` (of the breaks, one or two hops further along the chain), ``plus_one`` and ``plus_two`` (breaks
    that answered hop k+1, hop k+2), ``can_break`` (right questions whose chain runs past the answer) and
    ``ended_breaks`` (breaks of questions whose chain ends at the answer, where the task predicts none)."""
    summary: dict[int, dict[str, int]] = {}
    for row in rows:
        cell = summary.setdefault(row.hops, dict.fromkeys(
            ("right", "breaks", "as_predicted", "plus_one", "plus_two", "can_break", "ended_breaks"), 0))
        cell["right"] += row.right
        cell["can_break"] += row.right and row.beyond > 0
        cell["breaks"] += row.breaks
        cell["as_predicted"] += row.as_predicted
        cell["plus_one"] += row.breaks and row.deeper == row.hops + 1
        cell["plus_two"] += row.breaks and row.deeper == row.hops + 2
        cell["ended_breaks"] += row.breaks and row.beyond == 0
    return dict(sorted(summary.items()))
