"""The paper's 62-layer numbers mapped onto a model of any depth.

Layer ``l`` of an ``L``-layer model sits at fraction ``l / (L - 1)`` (layer 0 is 0.0, the last layer is 1.0), and
:func:`paper_layer` maps a layer the paper names onto the layer of another model at the same fraction, so the paper's
numbers round-trip exactly at ``L = 62``. :func:`scaled_top_k` scales the paper's top-k to another hidden size the
same way.
"""

from __future__ import annotations

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.paper import PAPER_HIDDEN_SIZE, PAPER_NUM_LAYERS, PAPER_TOP_K


def _check_layers(num_layers: int) -> None:
    if not isinstance(num_layers, int) or num_layers < 1:
        raise UsageError(f"num_layers must be a positive integer, got {num_layers!r}")


def paper_layer(layer: int, num_layers: int) -> int:
    """The layer of a ``num_layers`` model at the depth fraction of the paper's 62-layer ``layer``."""
    if not 0 <= layer < PAPER_NUM_LAYERS:
        raise UsageError(f"paper layer {layer} is outside 0..{PAPER_NUM_LAYERS - 1}")
    _check_layers(num_layers)
    return int(round(layer / (PAPER_NUM_LAYERS - 1) * (num_layers - 1)))


def scaled_top_k(hidden_size: int, k: int = PAPER_TOP_K, reference_size: int = PAPER_HIDDEN_SIZE) -> int:
    """The paper's top-k scaled to ``hidden_size``: ``round(hidden_size * k / reference_size)`` (at least 1).

    ``scaled_top_k(5376) == 1024``; ``scaled_top_k(640) == 122``.
    """
    if hidden_size < 1:
        raise UsageError(f"hidden_size must be positive, got {hidden_size}")
    return max(1, min(hidden_size, int(round(hidden_size * k / reference_size))))
