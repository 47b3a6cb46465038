"""Iterating one generated position under a per-position depth policy.

After each iteration the policy says which rows emit their token. In a batch the rows that still iterate are
re-run together with the rows that have halted (the cache holds one column per row; a sub-batch re-run would need
a sliced cache, which costs more than it saves at the batch sizes we use), so after every re-run the halted rows
get back what their halting iteration left: their KV entry at this position (the cache's last column, every
layer), their carried state, and their logits. What the re-run computed for them is thrown away, and the
recorder drops those passes (the rows are inactive in them). At batch size 1 halting simply stops iterating and
nothing is saved or restored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from sst_interp.model.halting import IterationSignals, PositionPolicy


@dataclass
class HaltedRows:
    """What halted rows keep from their halting iteration at the current position.

    Args:
        rows: [B] bool, rows that have halted (or were never iterating) at this position.
        logits: [B, V] logits of each halted row's halting iteration (None until a row halts while others go on).
        carry: per stateful layer, [B, d] carried state of each halted row.
        kv: per cache layer, (keys, values) of the current position, each [B, H, D].
    """

    rows: torch.Tensor
    logits: torch.Tensor | None = None
    carry: dict[int, torch.Tensor] = field(default_factory=dict)
    kv: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)

    def save(self, now: torch.Tensor, logits: torch.Tensor | None, carry: dict[int, torch.Tensor], cache) -> None:
        """Keep rows ``now`` ([B] bool, halting after the pass just run) from that pass, and add them to ``rows``."""
        self.rows = self.rows | now
        def merge(kept: torch.Tensor | None, fresh: torch.Tensor) -> torch.Tensor:
            mask = now.to(fresh.device).view(-1, *([1] * (fresh.ndim - 1)))
            return fresh.clone() if kept is None else torch.where(mask, fresh, kept)

        if logits is not None:
            self.logits = merge(self.logits, logits)
        for index, state in carry.items():
            self.carry[index] = merge(self.carry.get(index), state)
        layers = [(layer.keys[:, :, -1], layer.values[:, :, -1]) for layer in cache.layers]
        if not self.kv:
            self.kv = [(k.clone(), v.clone()) for k, v in layers]
        else:
            self.kv = [(merge(kk, k), merge(kv, v)) for (kk, kv), (k, v) in zip(self.kv, layers)]

    def restore(self, held: torch.Tensor, carry: dict[int, torch.Tensor], cache) -> None:  # noqa: ANN001
        """After a re-run, put back rows ``held`` ([B] bool, halted before it): carry and the cache's last column."""
        for index, state in carry.items():
            carry[index] = torch.where(held.to(state.device)[:, None], self.carry[index], state)
        for layer, (keys, values) in zip(cache.layers, self.kv):
            mask = held.to(keys.device)[:, None, None]
            layer.keys[:, :, -1] = torch.where(mask, keys, layer.keys[:, :, -1])
            layer.values[:, :, -1] = torch.where(mask, values, layer.values[:, :, -1])

    def final_logits(self, logits: torch.Tensor | None, held: torch.Tensor) -> torch.Tensor | None:
        """[B, V]: the kept logits for rows ``held`` and ``logits`` for the others."""
        if self.logits is None or logits is None:
            return logits
        return torch.where(held.to(logits.device)[:, None], self.logits, logits)


def signals_for(policy: PositionPolicy, iteration: int, logits: torch.Tensor | None, prev_logits: torch.Tensor | None,
                state: torch.Tensor | None, prev_state: torch.Tensor | None,
                hidden: torch.Tensor | None = None) -> IterationSignals:
    """The :class:`IterationSignals` ``policy`` reads (only what it needs)."""
    return IterationSignals(iteration=iteration,
                            logits=logits if policy.needs_logits else None,
                            prev_logits=prev_logits if policy.needs_logits else None,
                            state=state if policy.needs_state else None,
                            prev_state=prev_state if policy.needs_state else None,
                            hidden=hidden)
