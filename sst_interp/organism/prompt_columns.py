"""Lookups the prompt's own columns can do: a chain link that points backward in the prompt.

In ``c=b a=7 b=a ?c`` the query's chain is ``c -> b -> a -> 7``. The link ``b=a`` (the second binding followed) sits
at the third column and its target ``a`` is bound at the second (``a=7``): under causal attention the ``b=a`` column
can read ``a=7`` and hold ``b -> 7`` before the answer column asks for it. A link whose target is bound *later* in
the prompt cannot be resolved at its own column. So the answer column of a model that reads one binding per block
may still finish a chain in fewer iterations than ``ceil(h / 2)`` when links point backward: the re-evaluation of
``hops-organism`` found depth-1 accuracy on 3-hop questions of 0.33, 0.69 and 0.99 with 0, 1 and 2 backward links.

:func:`backward_links` counts them from the prompt and the chain a question stores.
"""

from __future__ import annotations

from collections.abc import Sequence

from sst_interp.organism.task import BIND, SEPARATOR


def binding_columns(prompt: str) -> dict[str, int]:
    """variable -> the prompt column (0-based token index) of its binding ``variable=value``."""
    return {token.split(BIND)[0]: column for column, token in enumerate(prompt.split(SEPARATOR)) if BIND in token}


def backward_links(prompt: str, chain: Sequence[str]) -> int:
    """How many of the chain's links ``chain[k-1]=chain[k]`` (k = 1 .. hops - 1; the last link's target is a digit)
    have their target ``chain[k]`` bound at an earlier column than the link itself. Between 0 and ``hops - 1``."""
    columns = binding_columns(prompt)
    return sum(columns[chain[k]] < columns[chain[k - 1]] for k in range(1, len(chain) - 1))
