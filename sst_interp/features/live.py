"""States from a live looped model at every prompt position: the training data of a dictionary when no run is
recorded (``python -m sst_interp.features train --live hops-organism``).

A recorded run keeps full states only at its first generated positions (the answer column of a hops run), while the
prompt's own columns do lookups too (docs/organism.md, "prompt columns"). This source runs the model (a
:class:`~sst_interp.model.loop_model.LoopModel`: HRM-Text, Inkling-2 Loop, a declared looped block) on prompts of
its training distribution, one forward call per batch of prompts at a fixed depth, and keeps the output of the
site's layer at every visit and every position: the same module outputs the recorder keeps at the last column
(:mod:`sst_interp.hooks.visits`), so at the answer column the two agree exactly. The k-th visit of the layer within
a call is iteration k, as the recorder counts them. The hooks are owned (:class:`~sst_interp.kernels.owned.OwnedHooks`)
and removed when the call returns, also on an exception.

:class:`LiveBatches` feeds SAELens' trainer: prompts are run ``prompt_batch`` at a time, their states pooled and
shuffled as :class:`~sst_interp.features.batches.StateBatches` does; when every prompt's states fit in the buffer the
model runs once and later passes reshuffle them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from sst_interp.features.batches import shuffled_batches
from sst_interp.hooks.capture import layer_output
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.owned import OwnedHooks
from sst_interp.model.loop_model import LoopModel


@torch.no_grad()
def live_states(model: LoopModel, input_ids: torch.Tensor, depth: int, layer: int,
                attention_mask: torch.Tensor | None = None) -> dict[int, torch.Tensor]:
    """The states of recorded ``layer`` at every iteration of one forward call at ``depth``, at every position.

    Args:
        model: the looped model.
        input_ids: [B, T] prompts (of one length, or left-padded with ``attention_mask``).
        depth: the iterations the call runs.
        layer: the recorded layer (``model.layer_names``), 0-based.

    Returns:
        iteration (1-based) -> [B, T, d] float32 on the CPU.
    """
    if not 0 <= layer < model.num_layers:
        raise UsageError(f"the model records layers 0-{model.num_layers - 1} ({', '.join(model.layer_names)}); "
                         f"there is no layer {layer}")
    states: dict[int, torch.Tensor] = {}

    def hook(address: Any) -> Any:
        def keep(module: torch.nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> None:
            _, visited = address(kwargs)
            if visited == layer:  # the k-th visit of the layer in this call is iteration k (as the recorder counts)
                states[len(states) + 1] = layer_output(output).detach().float().cpu()

        return keep

    ids = input_ids.to(model.device)
    mask = torch.ones_like(ids) if attention_mask is None else attention_mask.to(model.device)
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
    with OwnedHooks() as hooks, model.at_depth(depth):
        for module, address in model.loop.visit_sites(model.backbone):
            hooks.forward_with_kwargs(module, hook(address))
        # the recorder's own prefill call (a fresh cache): the same kernels, so the answer column matches it
        model.forward_logits(ids, mask, positions, None)
    if not states:
        raise UsageError(f"layer {layer} ({model.layer_names[layer]}) is never visited at depth {depth}")
    return states


class LiveBatches:
    """Endless batches [batch_size, d] float32 of the states of ``layer`` at ``iterations`` of ``model`` run at
    ``depth`` on ``prompts``, every position of every prompt.

    Args:
        prompts: [N, T] token ids (one length: the organism's prompts share one).
        shuffle_dims: permute the dimensions of each state by its own random permutation (the control without a
            mechanism: every state keeps its values, no dimension keeps its meaning).

    Attributes:
        tokens: per iteration, the distinct states read so far (complete once :attr:`epochs` >= 1).
        epochs: complete passes over the prompts.
    """

    def __init__(self, model: LoopModel, prompts: torch.Tensor, depth: int, layer: int, iterations: Sequence[int],
                 batch_size: int, buffer: int, seed: int, prompt_batch: int = 64, shuffle_dims: bool = False) -> None:
        if batch_size < 1 or buffer < batch_size:
            raise UsageError(f"--batch-size must be >= 1 and --buffer >= it, got {batch_size} and {buffer}")
        if len(prompts) == 0:
            raise UsageError("the live source has no prompts; pass --questions >= 1")
        self.model, self.prompts, self.depth, self.layer = model, prompts, int(depth), int(layer)
        self.iterations = tuple(int(i) for i in iterations)
        self.batch_size, self.buffer, self.prompt_batch = int(batch_size), int(buffer), int(prompt_batch)
        self.shuffle_dims = shuffle_dims
        self._rng = np.random.default_rng(seed)
        self.tokens: Counter[int] = Counter()
        self.epochs = 0
        self._stream = shuffled_batches(self._chunks(), model.hidden_size, self.batch_size, self.buffer, self._rng)

    def __iter__(self) -> LiveBatches:
        return self

    def __next__(self) -> torch.Tensor:
        return next(self._stream)

    def states_of(self, prompts: torch.Tensor) -> np.ndarray:
        """[rows, d] float32: the site's states of ``prompts`` at :attr:`iterations`, every position (shuffled in
        their dimensions when :attr:`shuffle_dims`)."""
        found = live_states(self.model, prompts, self.depth, self.layer)
        missing = [i for i in self.iterations if i not in found]
        if missing:
            raise UsageError(f"layer {self.layer} is visited at iterations 1-{len(found)} at depth {self.depth}; "
                             f"iteration {missing[0]} is not among them")
        parts = []
        for iteration in self.iterations:
            values = found[iteration].reshape(-1, found[iteration].shape[-1]).numpy()
            self.tokens[iteration] += len(values) if self.epochs == 0 else 0
            parts.append(values)
        values = np.concatenate(parts)
        if self.shuffle_dims:
            order = np.argsort(self._rng.random(values.shape), axis=1)  # one permutation per state
            values = np.take_along_axis(values, order, axis=1)
        return np.ascontiguousarray(values, dtype=np.float32)

    def _chunks(self) -> Iterator[tuple[np.ndarray, bool]]:
        resident: list[np.ndarray] | None = []
        rows = 0
        for start in range(0, len(self.prompts), self.prompt_batch):
            values = self.states_of(self.prompts[start:start + self.prompt_batch])
            rows += len(values)
            if resident is not None and rows <= self.buffer:
                resident.append(values)
            else:
                resident = None
            yield values, False
        self.epochs = 1
        if resident is not None:
            whole = np.concatenate(resident)
            while True:
                yield whole, True
                self.epochs += 1
        while True:  # more than the buffer holds: every pass reruns the model (its states do not change)
            for start in range(0, len(self.prompts), self.prompt_batch):
                yield self.states_of(self.prompts[start:start + self.prompt_batch]), False
            self.epochs += 1
