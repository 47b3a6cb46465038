"""Per-turn depth policies (:class:`DepthPolicy`): how many iterations each generated position of a model turn gets,
decided at its position 0 (:class:`FixedDepth` for a flat-depth run; the halting probe's policy is
:class:`sst_interp.probe.policy.ProbeDepth`; per-position policies are :mod:`sst_interp.model.halting`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from sst_interp.kernels.errors import UsageError


@runtime_checkable
class DepthPolicy(Protocol):
    """Decides how many iterations each generated position gets.

    Per-turn policies (:class:`FixedDepth`, the halting probe) implement this protocol. Per-position policies
    (:class:`~sst_interp.model.halting.PositionPolicy`, ``per_position = True``) implement it too but are driven
    through their ``halt`` method after every iteration of every position (:mod:`sst_interp.model.per_position`).

    For a per-turn policy the decision is taken at generated position 0 of every model turn (a single-turn
    generation call has one), after each iteration, and then holds for every later position of that turn.
    app:halting_eval: "At each model turn, the probe inspects the position-0 hidden state ... and that depth is
    used for the remainder of the question"; we read "remainder" as the rest of that model turn, since the probe
    inspects again at the next turn's position 0 (were the first decision to hold for the whole episode, there
    would be nothing to inspect). ``probe_layer`` names the decoder layer whose position-0 output
    :meth:`should_halt` reads (``None`` if it reads nothing).
    """

    max_depth: int
    probe_layer: int | None

    def should_halt(self, iteration: int, hidden: torch.Tensor | None) -> torch.Tensor | bool:
        """After ``iteration`` (1-based) at position 0: halt now? ``hidden`` is [B, d] at ``probe_layer``."""
        ...

    def describe(self) -> str:
        """A short description for manifests (e.g. ``fixed(3)``)."""
        ...


@dataclass(frozen=True)
class FixedDepth:
    """Every position gets exactly ``depth`` iterations (a flat-depth run)."""

    depth: int
    probe_layer: int | None = None

    def __post_init__(self) -> None:
        if int(self.depth) < 1:
            raise UsageError(f"depth must be at least 1, got {self.depth}")

    @property
    def max_depth(self) -> int:
        return int(self.depth)

    def should_halt(self, iteration: int, hidden: torch.Tensor | None) -> bool:
        return iteration >= self.depth

    def describe(self) -> str:
        return f"fixed({self.depth})"


def as_depth_policy(depth: int | DepthPolicy) -> DepthPolicy:
    """Accept a plain integer depth or a policy object."""
    if isinstance(depth, bool):
        raise UsageError("depth must be an integer >= 1 or a depth policy")
    if isinstance(depth, int):
        return FixedDepth(depth)
    if isinstance(depth, DepthPolicy):
        return depth
    raise UsageError(f"depth must be an integer >= 1 or a depth policy, got {type(depth).__name__}")
