"""The halting view: a saved halting probe's score on every model turn and iteration of one question.

The probe reads the position-0 state of a turn at its layer after each iteration (``app:halting_eval``; the state
:class:`~sst_interp.probe.policy.ProbeDepth` sees while generating) and halts where its logit exceeds the saved
threshold. Here it is applied to the recorded states of each flat depth: ``scores[depth][turn][i]`` is the logit
after iteration ``i + 1``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sst_interp.kernels.errors import UsageError
from sst_interp.explore.arrays import plain
from sst_interp.explore.question import check_question
from sst_interp.explore.source import RunSource


class ProbeScorer:
    """A loaded probe (torch is imported when the explorer is given one).

    Args:
        path: the saved probe (``probe train``'s folder or file).
        hidden_size: the run's d, checked against the probe's input size.
    """

    def __init__(self, path: Path, hidden_size: int) -> None:
        from sst_interp.probe.policy import ProbeDepth

        self.path = path
        self.policy = ProbeDepth.from_path(path)
        size = int(self.policy.probe.config.input_size)
        if size != hidden_size:
            raise UsageError(f"the probe {path} reads {size}-wide states; this run's hidden size is {hidden_size}")

    def scores(self, states: np.ndarray) -> np.ndarray:
        """Probe logits of ``states: [N, d]`` -> ``[N]`` float32 (NaN rows stay NaN)."""
        import torch

        rows = np.asarray(states, dtype=np.float32)
        ok = ~np.isnan(rows).any(axis=1)
        out = np.full(rows.shape[0], np.nan, dtype=np.float32)
        if ok.any():
            out[ok] = self.policy.logits(torch.from_numpy(rows[ok])).numpy()
        return out


def halting_view(source: RunSource, scorer: ProbeScorer | None, qid: str) -> dict[str, Any]:
    """``{threshold, layer, probe, depths: {depth: {turn: [logit per iteration]}}}`` for ``qid``."""
    if scorer is None:
        return {"available": False, "reason": "no halting probe given; start the explorer with --probe PATH"}
    check_question(source, qid)
    run = source.run
    layer = int(scorer.policy.probe_layer)
    if layer >= run.num_layers:
        raise UsageError(f"the probe reads layer {layer}; this run has {run.num_layers} layers")
    depths: dict[str, dict[str, Any]] = {}
    for depth in run.depths:
        if qid not in run.question_ids(depth):
            continue
        per_turn = {}
        for block in run.hidden(depth, [qid], layers=[layer], positions=[0]):
            if block.positions.size:
                per_turn[str(block.turn)] = plain(scorer.scores(block.values[0, :, 0, :]))
        depths[str(depth)] = per_turn
    return {"available": True, "probe": str(scorer.path), "layer": layer, "threshold": scorer.policy.threshold,
            "max_depth": scorer.policy.max_depth, "depths": depths}
