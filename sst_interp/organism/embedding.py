"""Factored binding embeddings: a training-time parametrisation of the organism's token embedding.

A binding token (``c=b``) is atomic, so without help each of the 936 binding embeddings learns only from its own
occurrences (about 0.7 per batch of 64 prompts), and the lookup a hop needs (the query's variable against the
binding's left side, the binding's right side as the next query) must be learned 936 times over. Here every
embedding row is a free row plus shared factors::

    E[c=b] = free[c=b] + left[c] + right[b]        (a binding)
    E[b]   = free[b]   + right[b]                  (a variable or a digit: the same vector it is on a right side)

so what one binding teaches about ``left[c]`` and ``right[b]`` reaches every binding that shares them, and a
variable reached by a hop is represented as the query variable is. The parametrisation is registered with
``torch.nn.utils.parametrize`` on transformers' own ``embed_tokens``; :func:`bake_factored_embeddings` folds it
into a plain weight before saving, so the saved organism is an ordinary ``HrmTextForCausalLM`` checkpoint.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import parametrize

from sst_interp.organism.task import BIND, DIGITS, VARIABLES, vocabulary
from sst_interp.organism.tokenizer import SPECIAL_TOKENS

_NONE = -1
# the factors start at the scale of transformers' own embedding init (initializer_range 0.02)
_FACTOR_STD = 0.02


def _factor_indices() -> tuple[torch.Tensor, torch.Tensor]:
    """Per vocabulary id: the left-side factor's row (variables) and the right-side factor's row (variables, then
    digits), ``_NONE`` where the token has none. Both ``[vocab]``, in the organism tokenizer's id order."""
    right_symbols = (*VARIABLES, *DIGITS)
    left, right = [], []
    for token in (*SPECIAL_TOKENS, *vocabulary()):
        if BIND in token and len(token) == 3:
            left.append(VARIABLES.index(token[0]))
            right.append(right_symbols.index(token[2]))
        elif token in right_symbols:
            left.append(_NONE)
            right.append(right_symbols.index(token))
        else:
            left.append(_NONE)
            right.append(_NONE)
    return torch.tensor(left), torch.tensor(right)


class FactoredBindings(nn.Module):
    """The parametrisation ``weight -> weight + left[lhs] + right[rhs]`` (rows without a factor get zero).

    Args:
        hidden_size: d of the embedding.
    """

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        left_index, right_index = _factor_indices()
        self.register_buffer("left_index", left_index.clamp(min=0), persistent=False)
        self.register_buffer("right_index", right_index.clamp(min=0), persistent=False)
        self.register_buffer("has_left", (left_index != _NONE).unsqueeze(-1), persistent=False)
        self.register_buffer("has_right", (right_index != _NONE).unsqueeze(-1), persistent=False)
        self.left = nn.Parameter(torch.randn(len(VARIABLES), hidden_size) * _FACTOR_STD)
        self.right = nn.Parameter(torch.randn(len(VARIABLES) + len(DIGITS), hidden_size) * _FACTOR_STD)

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        """``weight`` ``[vocab, d]`` -> the embedding actually used, ``[vocab, d]``."""
        shared = self.left[self.left_index] * self.has_left + self.right[self.right_index] * self.has_right
        return weight + shared.to(weight.dtype)


def factor_embeddings(embedding: nn.Embedding) -> None:
    """Register :class:`FactoredBindings` on ``embedding`` and zero the free rows of factored tokens, so that every
    binding starts as the sum of its sides' factors."""
    left_index, right_index = _factor_indices()
    factored = (left_index != _NONE) | (right_index != _NONE)
    if embedding.weight.shape[0] != factored.numel():
        raise ValueError(f"the embedding has {embedding.weight.shape[0]} rows; the organism tokenizer has "
                         f"{factored.numel()}")
    with torch.no_grad():
        embedding.weight[factored] = 0.0
    parametrize.register_parametrization(embedding, "weight", FactoredBindings(embedding.weight.shape[1]))


def bake_factored_embeddings(embedding: nn.Embedding) -> None:
    """Fold the parametrisation into a plain ``weight`` (what ``save_pretrained`` then writes); no-op without it."""
    if parametrize.is_parametrized(embedding, "weight"):
        parametrize.remove_parametrizations(embedding, "weight", leave_parametrized=True)
