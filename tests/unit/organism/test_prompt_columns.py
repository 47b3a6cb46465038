"""Backward links: a chain link whose target is bound earlier in the prompt (organism.prompt_columns)."""

from __future__ import annotations

import random

from sst_interp.organism.prompt_columns import backward_links, binding_columns
from sst_interp.organism.task import HopsSpec, make_question


def test_the_docs_example_has_one_backward_link():
    # c -> b -> a -> 7: c=b (column 0) reads b=a (column 2): forward; b=a reads a=7 (column 1): backward
    assert binding_columns("c=b a=7 b=a ?c") == {"c": 0, "a": 1, "b": 2}
    assert backward_links("c=b a=7 b=a ?c", ["c", "b", "a", "7"]) == 1
    assert backward_links("a=7 b=a c=b ?c", ["c", "b", "a", "7"]) == 2
    assert backward_links("c=b b=a a=7 ?c", ["c", "b", "a", "7"]) == 0
    assert backward_links("a=7 ?a", ["a", "7"]) == 0  # one hop: its only link ends in a digit


def test_generated_questions_count_between_zero_and_hops_minus_one():
    spec, rng = HopsSpec(), random.Random(0)
    counts = {}
    for _ in range(300):
        question = make_question(spec, rng, 3)
        counts.setdefault(backward_links(question.prompt, question.chain), 0)
        counts[backward_links(question.prompt, question.chain)] += 1
    assert set(counts) == {0, 1, 2}  # a shuffled prompt gives every arrangement of a 3-hop chain's two links
