"""What watches a generation: where each pass sits (:class:`PassInfo`), the observer protocol every generation
calls (:class:`GenerationObserver`), and several observers as one (:class:`ObserverGroup`: a recorder and an
intervener watch the same passes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch


@dataclass(frozen=True)
class PassInfo:
    """Where one decoder pass sits in the generation.

    Args:
        position: generated position within the turn (0 = the last prompt position), or ``None`` for passes that
            emit nothing (prompt passes, two-pass prefill pass 1).
        iteration: 1-based iteration at this position.
        depth: iterations planned for this position (the policy's maximum while position 0 is undecided).
        active: [B] bool, rows still generating (finished rows are computed but not to be recorded).
        turn: turn index (0 for single-turn generation).
    """

    position: int | None
    iteration: int
    depth: int
    active: torch.Tensor
    turn: int = 0


class GenerationObserver(Protocol):
    """Receives every pass of a generation call, from the pass that produced it (never a re-run)."""

    def on_pass_start(self, info: PassInfo) -> None: ...

    def on_pass_end(self, info: PassInfo, logits: torch.Tensor | None) -> None: ...

    def on_token(self, position: int, token_ids: torch.Tensor, active: torch.Tensor) -> None: ...


class NullObserver:
    """An observer that ignores every call (a generation without one)."""

    def on_pass_start(self, info: PassInfo) -> None:
        pass

    def on_pass_end(self, info: PassInfo, logits: torch.Tensor | None) -> None:
        pass

    def on_token(self, position: int, token_ids: torch.Tensor, active: torch.Tensor) -> None:
        pass



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
