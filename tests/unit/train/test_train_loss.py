"""Chunked cross-entropy equals the full cross-entropy and never builds more than one chunk of logits."""

from __future__ import annotations

import torch

from sst_interp.train.data import IGNORE_INDEX
from sst_interp.train.loss import chunked_cross_entropy, full_cross_entropy


def _setup(seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(2, 9, 6, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(11, 6, generator=g, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 11, (2, 9), generator=g)
    labels[0, :3] = IGNORE_INDEX
    labels[1, 5:7] = IGNORE_INDEX
    return hidden, weight, labels


def test_chunked_equals_full_in_value_and_gradient():
    hidden, weight, labels = _setup()
    logits = torch.tanh(hidden @ weight.T / 3.0) * 3.0
    full, n_full = full_cross_entropy(logits, labels)
    g_full = torch.autograd.grad(full, (hidden, weight))
    # labelled positions after the shift, counted by hand: row 0 labels 3..8 (6), row 1 labels 1..4 and 7..8 (6)
    assert n_full == 12
    for chunk in (1, 5, 12, 100):
        sizes = []

        def head(h):
            sizes.append(h.shape[0])
            return torch.tanh(h @ weight.T / 3.0) * 3.0

        total, n = chunked_cross_entropy(hidden, labels, head, chunk_size=chunk)
        grads = torch.autograd.grad(total, (hidden, weight))
        assert n == n_full
        torch.testing.assert_close(total, full, rtol=1e-12, atol=1e-12)
        for got, want in zip(grads, g_full):
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        assert max(sizes) <= chunk  # never more than one chunk of logits per head call (forward and recompute)


def test_no_labels_gives_zero_loss_with_a_graph():
    hidden, weight, labels = _setup()
    labels[:] = IGNORE_INDEX
    total, n = chunked_cross_entropy(hidden, labels, lambda h: h @ weight.T, chunk_size=4)
    assert n == 0 and total.item() == 0.0
    total.backward()  # still differentiable (zero gradients)
    assert float(hidden.grad.abs().sum()) == 0.0
