"""State propagation for two-pass training (paper eq:scan_recurrence, app:parallelisation).

The general recurrence is ``S_t = A * S_{t-1} + B_t`` with ``S_{-1} = 0``. The paper's model uses ``A = 0`` and
``B_t = o_t^(1)`` and shifts the result right by one position, so position t reads position t-1's pass-1 output
and position 0 reads zero. The ``ema_linked`` variant uses ``A = alpha`` and ``B_t = (1 - alpha) * o_t``.
"""

from __future__ import annotations

import torch


def linear_scan(decay: torch.Tensor, inputs: torch.Tensor, reset: torch.Tensor | None = None) -> torch.Tensor:
    """Evaluate ``S_t = decay * S_{t-1} + inputs_t`` along dimension 1, with ``S_{-1} = 0``.

    Args:
        decay: A, broadcastable to [B, d] (constant over time, e.g. alpha_l [d]).
        inputs: B_t, [B, T, d].
        reset: [B, T] bool, True where the recurrence restarts (``S_{t-1}`` is taken as zero), optional.

    Returns:
        S, [B, T, d] in the dtype of ``inputs``.
    """
    batch, length, _ = inputs.shape
    decay = decay.to(inputs.dtype)
    state = torch.zeros_like(inputs[:, 0])
    out = []
    for t in range(length):
        carried = decay * state
        if reset is not None:
            carried = torch.where(reset[:, t, None], torch.zeros_like(carried), carried)
        state = carried + inputs[:, t]
        out.append(state)
    return torch.stack(out, dim=1) if out else inputs.new_zeros(batch, 0, inputs.shape[-1])


def shift_states(
    outputs: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    segment_starts: torch.Tensor | None = None,
    decay: torch.Tensor | None = None,
) -> torch.Tensor:
    """Turn pass-1 layer outputs into the states pass 2 reads: entry t holds C_{t-1}.

    Args:
        outputs: pass-1 outputs o^(1) of one layer, [B, T, d].
        attention_mask: [B, T], 1 for real tokens; padded positions contribute zero states.
        segment_starts: [B, T] bool, True at the first token of each packed document; that token reads zero.
        decay: ``None`` for the direct update (A = 0); alpha [d] for ``ema_linked``
            (C_t = alpha * C_{t-1} + (1 - alpha) * o_t).

    Returns:
        [B, T, d]: zero at position 0, at segment starts and wherever the previous position is padding.
    """
    # Masks come from the inputs' device; under a device map this layer's outputs may live on another one.
    if segment_starts is not None:
        segment_starts = segment_starts.to(outputs.device)
    if attention_mask is not None:
        attention_mask = attention_mask.to(outputs.device)
        # where, not multiply: fully masked (padded) rows of eager attention can hold NaN, and NaN * 0 is NaN.
        outputs = torch.where(attention_mask[..., None].bool(), outputs, torch.zeros_like(outputs))
    if decay is not None:
        decay = decay.to(outputs.dtype)
        outputs = linear_scan(decay, (1.0 - decay) * outputs, segment_starts)
    shifted = torch.cat([torch.zeros_like(outputs[:, :1]), outputs[:, :-1]], dim=1)
    if segment_starts is not None:
        shifted = shifted.masked_fill(segment_starts[..., None], 0.0)
    return shifted
