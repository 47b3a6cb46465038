"""A generation observer the tests share: it keeps the logits of every pass that ran the LM head."""

from __future__ import annotations

import torch


class KeptLogits:
    """Keeps, per pass that ran the LM head, its (position, iteration) in ``keys`` and its logits [B, V] in
    ``batches``; ``logits`` is the first row of each (the single-prompt tests read it)."""

    def __init__(self) -> None:
        self.keys: list[tuple] = []
        self.batches: list[torch.Tensor] = []

    @property
    def logits(self) -> list[torch.Tensor]:
        return [batch[0] for batch in self.batches]

    def on_pass_start(self, info) -> None:  # noqa: ANN001 - the observer protocol
        pass

    def on_pass_end(self, info, logits) -> None:  # noqa: ANN001
        if logits is not None:
            self.keys.append((info.position, info.iteration))
            self.batches.append(logits.detach().clone())

    def on_token(self, position, token_ids, active) -> None:  # noqa: ANN001
        pass
