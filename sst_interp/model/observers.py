"""Several generation observers as one (a recorder and an intervener watch the same passes)."""

from __future__ import annotations

from typing import Any

import torch


class ObserverGroup:
    """Forwards every observer call to each of ``observers``, in order.

    Order matters only when observers change the model: an intervener listed before a recorder has set up the pass
    before the recorder's hooks see its outputs (both read the pass coordinates at ``on_pass_start``).
    """

    def __init__(self, *observers: Any) -> None:
        self.observers = [observer for observer in observers if observer is not None]

    def on_pass_start(self, info: Any) -> None:
        for observer in self.observers:
            observer.on_pass_start(info)

    def on_pass_end(self, info: Any, logits: torch.Tensor | None) -> None:
        for observer in self.observers:
            observer.on_pass_end(info, logits)

    def on_token(self, position: int, token_ids: torch.Tensor, active: torch.Tensor) -> None:
        for observer in self.observers:
            observer.on_token(position, token_ids, active)
