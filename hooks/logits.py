"""Per-iteration logit summaries (paper app:logit_methodology): top-K ids and log-probs, argmax, entropy, and the
log-probs of a tracked token set (the iteration-1 top-K of the same position) at every iteration."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from sst_interp.hooks.capture import _Entries, rows_to_columns
from sst_interp.hooks.config import PassState


def logit_summary(logits: torch.Tensor, k: int, tracked_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Summarise one pass's logits [B, V].

    Returns ``argmax`` [B] int32 (of the raw logits: the greedy choice), ``top_ids`` [B, K] int32 and
    ``top_logprobs`` [B, K] float32 (log_softmax in float32, descending), ``entropy`` [B] float32 (nats) and
    ``tracked_logprobs`` [B, K] float32: log-probs of ``tracked_ids`` [B, K] (this pass's own top-K when None).
    """
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    k = min(k, logprobs.shape[-1])
    top_logprobs, top_ids = logprobs.topk(k, dim=-1)
    probs = logprobs.exp()
    entropy = -torch.where(probs > 0, probs * logprobs, torch.zeros_like(probs)).sum(-1)
    tracked = top_logprobs if tracked_ids is None else logprobs.gather(-1, tracked_ids.long())
    return {
        "argmax": logits.argmax(-1).to(torch.int32),
        "top_ids": top_ids.to(torch.int32),
        "top_logprobs": top_logprobs,
        "entropy": entropy,
        "tracked_logprobs": tracked,
    }


class LogitCapture:
    """Collects :func:`logit_summary` of every recorded pass that ran the LM head.

    The tracked set of a position is the top-K of its first recorded iteration (iteration 1 when the LM head runs
    at every iteration, which ``record`` asks for).
    """

    FIELDS = ("argmax", "top_ids", "top_logprobs", "entropy", "tracked_logprobs")

    def __init__(self, state: PassState, top_k: int) -> None:
        self.state = state
        self.top_k = top_k
        self.entries = {name: _Entries() for name in self.FIELDS}
        self._tracked: dict[tuple[int, int], torch.Tensor] = {}

    def on_pass_end(self, logits: torch.Tensor | None) -> None:
        """Summarise ``logits`` [B, V] of the pass in ``state`` (ignored when not recording or None)."""
        if logits is None or self.state.kind is None or self.state.position is None:
            return
        key = (self.state.turn, self.state.position)
        summary = logit_summary(logits.detach(), self.top_k, self._tracked.get(key))
        self._tracked.setdefault(key, summary["top_ids"])
        for name in self.FIELDS:
            self.entries[name].add(self.state, 0, summary[name])

    def columns(self, question_ids: Sequence[str]) -> dict[str, Any] | None:
        """Writer columns of the logits table (rows of finished batch rows dropped)."""
        base = rows_to_columns(self.entries["argmax"], self.state.active, question_ids, "argmax", with_layer=False)
        if base is None:
            return None
        for name in self.FIELDS[1:]:
            base[name] = rows_to_columns(self.entries[name], self.state.active, question_ids, name,
                                         with_layer=False)[name]
        return base
