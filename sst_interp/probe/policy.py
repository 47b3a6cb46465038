"""The halting probe as a generation-time depth policy (``app:halting_eval``).

``ProbeDepth`` implements :class:`sst_interp.model.depth_policy.DepthPolicy`: at generated
position 0 of a generation call, after each iteration, generation hands it the probe layer's
output ``[B, d]``; it answers "halt" where the probe's logit exceeds the threshold. The depth
chosen there holds for every later position; a probe that never halts runs to ``max_depth``
(generation stops at ``max_depth`` regardless, and so does :meth:`ProbeDepth.should_halt`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from sst_interp.kernels.errors import UsageError
from sst_interp.probe.io import load_probe
from sst_interp.probe.model import HaltingProbe


class ProbeDepth:
    """Depth policy that halts when the probe's logit on the position-0 state exceeds ``threshold``.

    Args:
        probe: a trained :class:`HaltingProbe` (moved to the hidden state's device on first use).
        threshold: halting threshold on the logit (``log(0.3/0.7)`` in the paper).
        layer: the decoder layer the probe reads (``probe_layer`` of the protocol).
        max_depth: ``i_max``, the depth used when the probe never halts.
        source: where the probe came from, for :meth:`describe` (e.g. its path).
    """

    def __init__(self, probe: HaltingProbe, threshold: float, layer: int, max_depth: int = 4,
                 source: str = "") -> None:
        if int(max_depth) < 1:
            raise UsageError(f"max_depth must be at least 1, got {max_depth}")
        if int(layer) < 0:
            raise UsageError(f"probe layer must be >= 0, got {layer}")
        self.probe = probe.eval()
        self.threshold = float(threshold)
        self.probe_layer: int | None = int(layer)
        self.max_depth = int(max_depth)
        self.source = source

    @classmethod
    def from_path(cls, path: str | Path, max_depth: int | None = None, threshold: float | None = None) -> ProbeDepth:
        """Load a saved probe (``save_probe`` folder or file); ``max_depth``/``threshold`` override the saved ones."""
        probe, meta = load_probe(path)
        return cls(
            probe,
            meta.threshold if threshold is None else threshold,
            meta.layer,
            meta.max_depth if max_depth is None else max_depth,
            source=str(path),
        )

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Probe logits of ``hidden: [B, d]`` -> ``[B]`` float32 on ``hidden``'s device."""
        if hidden.ndim != 2:
            raise UsageError(f"the probe reads position-0 states shaped [B, d], got {tuple(hidden.shape)}")
        param = self.probe.fc2.weight
        if param.device != hidden.device:
            self.probe.to(hidden.device)
        with torch.no_grad():
            return self.probe(hidden.detach().to(torch.float32))

    def should_halt(self, iteration: int, hidden: torch.Tensor | None) -> torch.Tensor:
        """After ``iteration`` (1-based) at position 0: ``[B]`` bool, True where the probe halts.

        At ``iteration >= max_depth`` every row halts (the probe never halted: use ``i_max``).
        """
        if hidden is None:
            raise UsageError("the probe depth policy needs the probe layer's position-0 hidden state")
        if iteration >= self.max_depth:
            return torch.ones(hidden.shape[0], dtype=torch.bool, device=hidden.device)
        return self.logits(hidden) > self.threshold

    def describe(self) -> str:
        """``probe:<source>@layer<L>,t=<threshold>,max=<max_depth>`` for manifests."""
        return f"probe:{self.source}@layer{self.probe_layer},t={self.threshold:.6g},max={self.max_depth}"
