"""Chunked cross-entropy (paper app:training_setup: "chunked cross-entropy loss").

Only labelled positions need logits, and those are computed ``chunk_size`` positions at a time, each chunk under
activation checkpointing: its ``[chunk, V]`` float32 logits are freed after the forward and recomputed in the backward.
So the ``B x T x V`` float32 logits tensor is never materialised, in the forward or the backward.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from sst_interp.train.data import IGNORE_INDEX

HeadFn = Callable[[torch.Tensor], torch.Tensor]


def lm_head_logits(backbone: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """The LM head of a Hugging Face causal LM on final-norm hidden states, with Gemma's logit soft-capping.

    Args:
        backbone: the causal LM (its ``get_output_embeddings()`` is the head).
        hidden: [..., d].

    Returns:
        logits [..., V], at least float32 (the same computation as :meth:`sst_interp.model.SSTModel.lm_logits`).
    """
    logits = backbone.get_output_embeddings()(hidden)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    softcap = getattr(backbone.config, "final_logit_softcapping", None)
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    return logits


def _chunk_loss(hidden: torch.Tensor, targets: torch.Tensor, head: HeadFn) -> torch.Tensor:
    logits = head(hidden)
    return F.cross_entropy(logits, targets, reduction="sum")


def select_labelled(hidden: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The hidden states that predict a label, and those labels (next-token shift).

    Args:
        hidden: [B, T, d].
        labels: [B, T] (not shifted; -100 = no label).

    Returns:
        ``(h, y)``: h [N, d] are the states at positions t-1 whose next token t has a label, y [N] those labels.
    """
    shifted = labels[:, 1:]
    keep = shifted != IGNORE_INDEX
    return hidden[:, :-1][keep], shifted[keep]


def chunked_cross_entropy(
    hidden: torch.Tensor, labels: torch.Tensor, head: HeadFn, chunk_size: int = 1024
) -> tuple[torch.Tensor, int]:
    """Summed next-token cross-entropy over labelled positions, computed in chunks.

    Args:
        hidden: final-norm hidden states, [B, T, d].
        labels: [B, T], -100 where unlabelled (position t's label is predicted from position t-1).
        head: hidden [N, d] -> logits [N, V] (the LM head, soft-cap included).
        chunk_size: labelled positions per chunk.

    Returns:
        ``(loss_sum, n)``: the sum (float32, or float64 for a float64 model) of the per-token losses (0-dim tensor, differentiable) and the number of
        labelled positions n. Divide by the token count of the whole optimiser step for a per-token mean.
    """
    h, y = select_labelled(hidden, labels)
    n = int(y.numel())
    total = hidden.new_zeros((), dtype=torch.promote_types(hidden.dtype, torch.float32))
    if n == 0:
        return total + 0.0 * hidden.sum(), 0
    use_checkpoint = torch.is_grad_enabled() and h.requires_grad
    for start in range(0, n, chunk_size):
        h_chunk, y_chunk = h[start : start + chunk_size], y[start : start + chunk_size]
        if use_checkpoint:
            part = checkpoint(_chunk_loss, h_chunk, y_chunk, head, use_reentrant=False)
        else:
            part = _chunk_loss(h_chunk, y_chunk, head)
        total = total + part
    return total, n


def full_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Reference: the same summed loss from full logits [B, T, V] (materialised); for tests and checks."""
    shifted = labels[:, 1:]
    loss = F.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), shifted.reshape(-1), ignore_index=IGNORE_INDEX,
        reduction="sum",
    )
    return loss, int((shifted != IGNORE_INDEX).sum())
