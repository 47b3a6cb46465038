"""Layer bands: the paper's 62-layer numbers mapped onto a model of any depth.

The paper's model has 62 layers and names bands such as "gate activity peaks in layers 22--30". :func:`layer_band`
maps a band given as fractions of depth onto any model, and :func:`paper_band` / :func:`paper_layer` translate the
paper's 62-layer numbers. Layer ``l`` of an ``L``-layer model sits at fraction ``l / (L - 1)`` (layer 0 is 0.0, the
last layer is 1.0), so the paper's bands round-trip exactly at ``L = 62``. :func:`scaled_top_k` scales the paper's
top-k to another hidden size the same way.
"""

from __future__ import annotations

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.paper import PAPER_HIDDEN_SIZE, PAPER_NUM_LAYERS, PAPER_TOP_K

# Named layer bands of the paper (inclusive layer numbers of the 62-layer model).
PAPER_BANDS: dict[str, tuple[int, int]] = {
    # sec:punctuated_equilibrium, "Layer profile structure"
    "gate_activity_peak": (22, 30),  # 30-40% of FFN gate units active
    "gate_flip_peak": (15, 35),  # highest gate flip rates between iterations
    "early_descent": (5, 25),  # median overlap descends to the layer-25 local minimum
    "mid_recovery": (25, 30),  # median rises again after the local minimum
    "deep_descent": (50, 61),  # second descent to the global minimum at the last layer
    # app:alpha_analysis, fig:alpha_panels_deviation_full
    "alpha_shallow_plateau": (0, 15),
    "alpha_rising": (15, 30),
    # whole stack
    "all": (0, 61),
}


def _check_layers(num_layers: int) -> None:
    if not isinstance(num_layers, int) or num_layers < 1:
        raise UsageError(f"num_layers must be a positive integer, got {num_layers!r}")


def layer_fraction(layer: int, num_layers: int) -> float:
    """Position of ``layer`` in a ``num_layers`` stack as a fraction in [0, 1] (0 = first, 1 = last)."""
    _check_layers(num_layers)
    if not 0 <= layer < num_layers:
        raise UsageError(f"layer {layer} is outside 0..{num_layers - 1}")
    return 0.0 if num_layers == 1 else layer / (num_layers - 1)


def layer_band(fraction_lo: float, fraction_hi: float, num_layers: int) -> range:
    """Layers of a ``num_layers`` model whose depth fraction lies in the band (inclusive).

    The band ends are rounded to the nearest layer, so ``layer_band(20/61, 35/61, 62)``
    is ``range(20, 36)``; the band always holds at least one layer.
    """
    _check_layers(num_layers)
    if not 0.0 <= fraction_lo <= fraction_hi <= 1.0:
        raise UsageError(
            f"layer band fractions must satisfy 0 <= lo <= hi <= 1, got lo={fraction_lo}, hi={fraction_hi}"
        )
    top = num_layers - 1
    lo = int(round(fraction_lo * top))
    hi = int(round(fraction_hi * top))
    return range(lo, max(hi, lo) + 1)


def paper_layer(layer: int, num_layers: int) -> int:
    """The layer of a ``num_layers`` model at the depth fraction of the paper's 62-layer ``layer``."""
    if not 0 <= layer < PAPER_NUM_LAYERS:
        raise UsageError(f"paper layer {layer} is outside 0..{PAPER_NUM_LAYERS - 1}")
    _check_layers(num_layers)
    return int(round(layer / (PAPER_NUM_LAYERS - 1) * (num_layers - 1)))


def paper_band(name: str, num_layers: int = PAPER_NUM_LAYERS) -> range:
    """A named band of the paper (see ``PAPER_BANDS``) mapped onto a ``num_layers`` model."""
    if name not in PAPER_BANDS:
        raise UsageError(f"unknown paper band {name!r}; choose one of {', '.join(sorted(PAPER_BANDS))}")
    lo, hi = PAPER_BANDS[name]
    top = PAPER_NUM_LAYERS - 1
    return layer_band(lo / top, hi / top, num_layers)


def scaled_top_k(hidden_size: int, k: int = PAPER_TOP_K, reference_size: int = PAPER_HIDDEN_SIZE) -> int:
    """The paper's top-k scaled to ``hidden_size``: ``round(hidden_size * k / reference_size)`` (at least 1).

    ``scaled_top_k(5376) == 1024``; ``scaled_top_k(640) == 122``.
    """
    if hidden_size < 1:
        raise UsageError(f"hidden_size must be positive, got {hidden_size}")
    return max(1, min(hidden_size, int(round(hidden_size * k / reference_size))))
