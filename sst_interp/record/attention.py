"""``record --attention LAYERS[:HEADS]`` and ``--attention-top-k K``: the flags read, and what a run that records
attention says about it in its identity and manifest (docs/format.md, ``attention/``).

Light on purpose (no torch): :mod:`sst_interp.record.options` checks the flags' syntax here before anything loads.
The checks against the loaded model (a layer or head it lacks) are :func:`sst_interp.record.preflight.check_attention`;
the hooks that record are :mod:`sst_interp.hooks.attention`.
"""

from __future__ import annotations

from typing import Any

from sst_interp.kernels.errors import UsageError

#: What the flag's value looks like, for messages.
FORM = "LAYERS[:HEADS], each 'all' or comma-separated indices and ranges (e.g. all, 0,2-3:1)"


def parse_indices(text: str, what: str) -> tuple[int, ...] | None:
    """``all`` -> None; ``0,2-4`` -> (0, 2, 3, 4). A bad list is a UsageError naming ``what``."""
    text = text.strip()
    if text == "all":
        return None
    values: list[int] = []
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high) if dash else int(low)
        except ValueError:
            raise UsageError(f"--attention {what} {text!r} is not a list of indices; give {FORM}") from None
        if first < 0 or last < first:
            raise UsageError(f"--attention {what} {part.strip()!r} is not an index >= 0 or a range low-high; give "
                             f"{FORM}")
        values.extend(range(first, last + 1))
    if len(set(values)) != len(values):
        raise UsageError(f"--attention {what} {text!r} names an index twice")
    return tuple(sorted(values))


def parse_attention(text: str) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """``--attention``'s value -> (layers, heads), each None for ``all``; bad syntax is a UsageError."""
    layers, sep, heads = text.partition(":")
    if not layers.strip() or (sep and not heads.strip()):
        raise UsageError(f"--attention {text!r}: give {FORM}")
    return parse_indices(layers, "layers"), parse_indices(heads, "heads") if sep else None


def check_flags(attention: str | None, top_k: int | None) -> None:
    """The flags' syntax, before anything loads: ``--attention``'s value, and ``--attention-top-k`` >= 1 and only
    with ``--attention``."""
    if attention is not None:
        parse_attention(attention)
    if top_k is not None and attention is None:
        raise UsageError("--attention-top-k applies to --attention; add --attention LAYERS[:HEADS] or drop it")
    if top_k is not None and top_k < 1:
        raise UsageError(f"--attention-top-k must be at least 1, got {top_k}")


def attention_identity(attention: str | None, top_k: int | None) -> dict[str, Any]:
    """The run identity's keys for attention: ``{"attention": {"layers", "heads", "top_k"}}`` when recorded (a
    resume must record the same), else nothing, so that the identity of a run without it is unchanged."""
    if attention is None:
        return {}
    layers, heads = parse_attention(attention)
    return {"attention": {"layers": "all" if layers is None else list(layers),
                          "heads": "all" if heads is None else list(heads), "top_k": top_k}}


def attention_manifest(attention: str | None, top_k: int | None, num_layers: int) -> dict[str, Any]:
    """The manifest's ``attention`` key when recorded (docs/format.md): the recorded layers (``all`` resolved to the
    run's layer axis), the heads (``all``, or the indices kept in each of them), ``top_k`` (None: every key) and
    which queries; nothing otherwise."""
    if attention is None:
        return {}
    layers, heads = parse_attention(attention)
    return {"attention": {"layers": list(range(num_layers)) if layers is None else list(layers),
                          "heads": "all" if heads is None else list(heads), "top_k": top_k,
                          "queries": "the full positions of each turn (0 .. full_positions - 1), every iteration"}}
