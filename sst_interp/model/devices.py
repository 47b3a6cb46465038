"""``--device``: which torch devices a command may name, checked before anything loads.

torch accepts a device string lazily: ``torch.device("bogus")`` raises a RuntimeError listing every backend torch
knows, and ``cuda`` on a machine without CUDA fails only when the first tensor moves (an AssertionError deep inside
the model load). Both are bad input, so :func:`check_device` turns them into one-line
:class:`~sst_interp.errors.UsageError` s before the model is loaded.
"""

from __future__ import annotations

import torch

from sst_interp.errors import UsageError

#: What ``--device`` accepts, in words (for messages).
DEVICE_HELP = "auto, cpu, cuda or cuda:N (the GPU index), or mps"


def check_device(text: str, flag: str = "--device") -> str:
    """Check ``text`` as a ``--device`` value and return it resolved (``auto`` -> ``cuda`` when available, else
    ``cpu``). An unknown device, a GPU this machine does not have, or ``mps`` without MPS is a UsageError."""
    if text == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise UsageError(f"{flag} {text!r} is not a device; use {DEVICE_HELP}") from None
    if device.type == "cpu":
        return text
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise UsageError(f"{flag} {text}: CUDA is not available on this machine (torch "
                             f"{torch.__version__}); use {flag} cpu or {flag} auto")
        if device.index is not None and device.index >= count:
            raise UsageError(f"{flag} {text}: this machine has {count} CUDA device(s), numbered 0 to {count - 1}")
        return text
    if device.type == "mps":
        if not torch.backends.mps.is_available():
            raise UsageError(f"{flag} {text}: MPS is not available on this machine; use {flag} cpu or {flag} auto")
        return text
    raise UsageError(f"{flag} {text!r}: sst-interp runs on {DEVICE_HELP}, not {device.type}")


#: What ``--dtype`` accepts.
DTYPES = ("auto", "float32", "bfloat16")


def resolve_dtype(text: str, device: str, flag: str = "--dtype") -> str:
    """``--dtype`` resolved for ``device`` (already resolved): ``auto`` is bfloat16 on a GPU and float32 on the CPU
    (where bfloat16 matmuls are slow and the exactness tests run); ``float32``/``bfloat16`` stay as given."""
    if text not in DTYPES:
        raise UsageError(f"{flag} must be one of {', '.join(DTYPES)}, got {text!r}")
    return auto_dtype(device) if text == "auto" else text


def auto_dtype(device: str) -> str:
    """What ``--dtype auto`` means on ``device``: bfloat16 on a GPU, float32 on the CPU (every command's rule)."""
    return "bfloat16" if str(device).startswith("cuda") else "float32"
