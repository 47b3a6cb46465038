"""Which tensors a compiled decode step is told keep their address.

CUDA graphs replay their kernels on the addresses they captured, so every buffer the step reads or writes between
replays (the KV cache, its column, the carried states, the stream edits) keeps its address, and dynamo must be told
(``mark_static_address``), or it copies the tensor into the graph's own input before every replay.

On the CPU there is nothing to replay, and the mark would do harm: the CPU compilation freezes its weights
(:func:`sst_interp.model.compile_recipe.compile_fn`), and the inductor's freezing folds every parameter and every
statically marked tensor that the graph itself does not write into the compiled code as a constant. A buffer the host
fills between passes (the cache's column, a stream edit, the pass's token ids) would then keep the value it had at
compilation: measured on the default backbone, marked buffers under freezing decoded a different token from the
third on. Hence only CUDA tensors are marked.
"""

from __future__ import annotations

import torch


def mark_static(tensor: torch.Tensor) -> torch.Tensor:
    """Mark ``tensor`` (any shape) as a fixed-address input of compiled steps when it lives on CUDA; returns it."""
    if tensor.device.type == "cuda":
        torch._dynamo.mark_static_address(tensor)
    return tensor
