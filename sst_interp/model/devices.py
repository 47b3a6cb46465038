"""``--device``, ``--dtype`` and a process's rank: the one place where every command resolves them, checked before
anything loads (the flags, their values and defaults are declared in :mod:`sst_interp.model.device_flags`).

torch accepts a device string lazily: ``torch.device("bogus")`` raises a RuntimeError listing every backend torch
knows, and ``cuda`` on a machine without CUDA fails only when the first tensor moves (an AssertionError deep inside
the model load). Both are bad input, so :func:`check_device` turns them into one-line
:class:`~sst_interp.kernels.errors.UsageError` s before the model is loaded.
"""

from __future__ import annotations

import torch

from sst_interp.kernels.errors import UsageError
from sst_interp.model.device_flags import DEVICE_HELP, DTYPES, auto_dtype


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


def resolve_dtype(text: str, device: str, flag: str = "--dtype", allowed: tuple[str, ...] = DTYPES) -> str:
    """``--dtype`` resolved for ``device`` (already resolved): ``auto`` is :func:`auto_dtype`; the other
    ``allowed`` names stay as given."""
    if text not in allowed:
        raise UsageError(f"{flag} must be one of {', '.join(allowed)}, got {text!r}")
    return auto_dtype(device) if text == "auto" else text


def resolve_placement(device: str, dtype: str, mapped: bool) -> tuple[str, str]:
    """``(device, dtype)`` of a command's ``--device`` and ``--dtype``: the device checked and resolved
    (:func:`check_device`) and the dtype resolved for it. Under a device map (``mapped``) ``--device`` is not used
    (returned as given) and ``auto`` is the dtype of the GPUs the layers go to, when there are any."""
    if not mapped:
        resolved = check_device(device)
        return resolved, resolve_dtype(dtype, resolved)
    return device, resolve_dtype(dtype, "cuda" if torch.cuda.is_available() else "cpu")


def rank_device(device: str, local_rank: int | None) -> str:
    """The device of one process among several on a machine (``local_rank``; None when it runs alone): a plain
    ``cuda`` becomes ``cuda:<local_rank>`` (an explicit ``cuda:N`` and the CPU stay). A local rank this machine has
    no GPU for is a UsageError."""
    if local_rank is None or device != "cuda":
        return device
    count = torch.cuda.device_count()
    if local_rank >= count:
        raise UsageError(f"LOCAL_RANK={local_rank} but this machine has {count} CUDA devices; start at most that "
                         "many processes per machine")
    return f"cuda:{local_rank}"
