"""An :class:`~sst_interp.interventions.apply.Intervener` on the compiled decode step: its rules as tensors.

The compiled step (:mod:`sst_interp.model.compiled`) runs one graph per batch shape; an intervening run uses a
second graph whose layers apply :class:`~sst_interp.model.stream_edits.StreamEdits` (affine maps, an alpha override,
freeze and stream-off masks). Before every compiled pass, :func:`fill_edits` writes those buffers from the
Intervener's own rule matching at the pass's (turn, position, iteration), row masks and recorded-run references, and
counts the sites it changes exactly as the eager path counts them (``state_in``, ``alpha`` and ``blended`` only where
the layer reads a state), so :meth:`~sst_interp.interventions.apply.Intervener.site_report` is the same either way.
Passes that run eager (the prompt) keep the Intervener's Python hooks.

Each rule is an affine map of the stream's value, composed in rule order on the rows it changes: ``zero`` is
0 * v + 0, ``add`` is v + scale * direction, ``patch``/``mean``/``resample`` with scale s are (1 - s) * v + s * ref
(s = 1: the reference exactly); ``state_in`` ``mean``/``resample`` add w * S(C_ref) with S read in the graph with
this pass's h. One rule per site reproduces the eager values bit for bit at scale 0 or 1 and for ``zero`` and
``add``; a scale between, or several rules at one site, round in another order (float32 rounding).

Refused on the compiled path (:func:`spec_refusal`, :func:`intervener_refusal`; one line naming ``--compile off``):
attention rules (the step does not reach the attention function), live sources (another row, clean twins), ``map``
(a Python function), ``capture=``, and two ``mean``/``resample`` rules on ``state_in`` that can meet at one site (the
step holds one reference state per layer).
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import torch

from sst_interp.interventions.spec import ATTENTION, READS_RUN, InterventionSpec, Site
from sst_interp.kernels.errors import UsageError


def spec_refusal(spec: InterventionSpec) -> str | None:
    """Why ``spec`` cannot run on the compiled step (one line naming ``--compile off``), or None when it can."""
    for number, item in enumerate(spec.interventions, 1):
        if item.operation.kind == "map":
            return (f"intervention {number}: a 'map' runs the Python function {item.operation.function!r} on the "
                    f"stream and cannot run compiled; use --compile off")
        if item.site.stream == ATTENTION:
            return (f"intervention {number}: an attention pattern is replaced inside the attention function, which "
                    f"the compiled step does not reach; use --compile off")
        if item.operation.kind == "feature":
            return (f"intervention {number}: a 'feature' edit encodes the stream with its dictionary in Python and "
                    f"cannot run compiled; use --compile off")
        if item.operation.live:
            return (f"intervention {number}: a live patch (source={item.operation.source!r}) reads another row inside "
                    f"the forward pass and cannot run compiled; use --compile off")
    references = [(number, item.site) for number, item in enumerate(spec.interventions, 1)
                  if item.site.stream == "state_in" and item.operation.kind in READS_RUN]
    for (first, one), (second, other) in combinations(references, 2):
        if _overlap(one, other):
            return (f"interventions {first} and {second}: two mean/resample rules on state_in can meet at one site, "
                    f"and the compiled step holds one reference state per layer; use --compile off")
    return None


def intervener_refusal(intervener: Any) -> str | None:
    """:func:`spec_refusal` of each row's spec, and the Intervener options the compiled step cannot serve."""
    if intervener._capture:
        return (f"capturing streams ({', '.join(intervener._capture)}) reads them through Python hooks and cannot run "
                f"compiled; use --compile off")
    if intervener.alongside is not None:
        return "clean passes alongside (source 'clean') cannot run compiled; use --compile off"
    for spec in intervener.row_specs:
        refusal = spec_refusal(spec)
        if refusal is not None:
            return refusal
    return None


def _overlap(one: Site, other: Site) -> bool:
    return all(a is None or b is None or bool(set(a) & set(b)) for a, b in (
        (one.layers, other.layers), (one.positions, other.positions), (one.iterations, other.iterations),
        (one.turns, other.turns)))


def fill_edits(intervener: Any, edits: Any) -> None:
    """Write ``edits`` (a :class:`~sst_interp.model.stream_edits.StreamEdits`) for the pass the Intervener is in
    (its ``on_pass_start`` has run), layer by layer in the order the eager layers ask, and count the sites."""
    for index in range(edits.num_layers):
        stateful = index in edits.stateful
        reads = stateful and not intervener.reads_no_state(index)
        if reads:
            _state_in(intervener, edits, index)
            _alpha(intervener, edits, index)
            edits.set_affine("blended", index, *_affine(intervener, edits, "blended", index))
        elif stateful:  # the stream is off: the blend's streams exist nowhere this pass
            edits.set_affine("state_in", index, None, None)
            edits.set_reference(index, None, None)
            edits.set_alpha(index, None, None)
            edits.set_affine("blended", index, None, None)
        edits.set_affine("layer_out", index, *_affine(intervener, edits, "layer_out", index))
        if stateful:
            frozen = intervener.freeze(index, read_state=reads)
            edits.set_flags(index, off=not reads, frozen=frozen)


def _rules(intervener: Any, stream: str, index: int) -> list[Any]:
    return [rule for rule in intervener._matching(stream, index) if rule.operation.kind != "freeze"]


def _row_mask(intervener: Any, rule: Any, batch: int) -> torch.Tensor:
    rows = intervener._rows(rule)
    return torch.ones(batch, dtype=torch.bool) if rows is None else rows


def _operation(intervener: Any, rule: Any, index: int, batch: int, dtype: torch.dtype
               ) -> tuple[float, torch.Tensor | float, torch.Tensor, torch.Tensor | None]:
    """(a, b, rows [B] bool, reference) of one rule: value' = a * value + b on ``rows``; a ``state_in`` reference
    rule instead returns b = 0 and its carried reference C_ref [B, d] (read through S in the graph)."""
    operation = rule.operation
    kind, scale = operation.kind, float(operation.scale)
    if operation.live:
        raise UsageError(intervener_refusal(intervener) or "a live source cannot run compiled; use --compile off")
    if kind in READS_RUN:
        reference, rows = intervener._reference(rule, index)
        if kind not in ("patch", "resample"):
            intervener._count(rule, intervener._changed_rows(rule))
        if rule.site.stream == "state_in":
            return 1.0 - scale, 0.0, rows, reference
        # eager rounds the reference to the value's dtype first; a float32 reference is exact in the wider type
        return 1.0 - scale, scale * reference.to(dtype)[:, None, :], rows, None
    intervener._count(rule, intervener._changed_rows(rule))
    rows = _row_mask(intervener, rule, batch)
    if kind == "zero":
        return 0.0, 0.0, rows, None
    if kind == "add":
        return 1.0, scale * intervener._directions[operation].to(dtype), rows, None
    raise AssertionError(f"operation {kind} has no affine form")


def _affine(intervener: Any, edits: Any, stream: str, index: int
            ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The composed (scale [B, 1, 1], shift [B, 1, d]) of the rules at (stream, layer), or (None, None)."""
    rules = _rules(intervener, stream, index)
    if not rules:
        return None, None
    dtype = edits.scale[stream][index].dtype
    scale = torch.ones(edits.batch, 1, 1, dtype=dtype)
    shift = torch.zeros(edits.batch, 1, edits.hidden_size, dtype=dtype)
    for rule in rules:
        a, b, rows, _ = _operation(intervener, rule, index, edits.batch, dtype)
        where = rows[:, None, None]
        scale, shift = torch.where(where, a * scale, scale), torch.where(where, a * shift + b, shift)
    return scale, shift


def _state_in(intervener: Any, edits: Any, index: int) -> None:
    """``state_in`` of a stateful layer: the affine map and the one reference term w * S(C_ref)."""
    rules = _rules(intervener, "state_in", index)
    if not rules:
        edits.set_affine("state_in", index, None, None)
        edits.set_reference(index, None, None)
        return
    batch, d = edits.batch, edits.hidden_size
    scale, shift = torch.ones(batch, 1, 1), torch.zeros(batch, 1, d)
    weight, state = torch.zeros(batch, 1, 1), torch.zeros(batch, 1, d)
    used = torch.zeros(batch, dtype=torch.bool)
    for rule in rules:
        a, b, rows, reference = _operation(intervener, rule, index, batch, torch.float32)
        where = rows[:, None, None]
        scale, shift = torch.where(where, a * scale, scale), torch.where(where, a * shift + b, shift)
        weight = torch.where(where, a * weight, weight)
        if reference is not None:
            if bool((used & rows).any()):
                raise UsageError(spec_refusal(intervener.spec) or "two state_in references at one site cannot run "
                                 "compiled; use --compile off")
            weight = torch.where(where, weight + float(rule.operation.scale), weight)
            state = torch.where(where, reference.float()[:, None, :], state)
            used |= rows
    edits.set_affine("state_in", index, scale, shift)
    if bool(used.any()):
        edits.set_reference(index, weight, state)
    else:
        edits.set_reference(index, None, None)


def _alpha(intervener: Any, edits: Any, index: int) -> None:
    """``set_alpha`` rules: later rules overwrite earlier ones on their rows."""
    rules = intervener._matching("alpha", index)
    if not rules:
        edits.set_alpha(index, None, None)
        return
    mask = torch.zeros(edits.batch, 1, 1, dtype=torch.bool)
    value = torch.zeros(edits.batch, 1, 1)
    for rule in rules:
        rows = _row_mask(intervener, rule, edits.batch)
        mask[rows] = True
        value[rows] = float(rule.operation.value)
        intervener._count(rule, intervener._changed_rows(rule))
    edits.set_alpha(index, mask, value)
