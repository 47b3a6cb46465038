"""The intervention experiments on a natively looping family (HRM-Text, Inkling-2 Loop, and any family a
:class:`~sst_interp.model.loop_declaration.LoopDeclaration` with ``visit_sites`` declares): what differs from an SST, read from
the family's declaration and nothing else.

The experiments' controls, statistics, tables and manifests are the SST's own (:mod:`~sst_interp.experiments.window`,
:mod:`~sst_interp.experiments.trace`, :mod:`~sst_interp.experiments.steer`,
:mod:`~sst_interp.experiments.attribution`); this module supplies the three things a family does its own way:

- **where a state is carried** (window). A family has no ``state_in``; its carried state leaves the visits of
  ``loop.freeze_layers`` (HRM-Text: the last block of each stack visit; Inkling-2 Loop: the looped layers) from
  iteration ``loop.freeze_from`` on. A window is a run of those *carrying layers* (``--size``/``--stride`` count
  them), and "iterations after the first carrying one are denied the state" is ``freeze`` at iterations
  ``freeze_from .. k-1`` there (:func:`window_spec`). The ``mean``/``resample`` controls put the clean depth-k run's
  mean (another question's) ``layer_out`` at the same visits. ``zero`` is refused: it zeroes the SST blend's input,
  which a family does not have.
- **which iterations a layer has** (trace, attribution): a layer's states exist only at the iterations the family
  visits it (:func:`visited_iterations`; Inkling-2 Loop's layers outside the loop: iteration 1 only), so depth k's
  "last iteration" is per layer, and a layer x iteration cell the family never visits is not measured.
- **how a forced pass runs** (trace, attribution): one forward call per token
  (:func:`~sst_interp.model.loop_model.generate_looped` with ``force``), interventions through
  :func:`~sst_interp.interventions.loops.intervene_loop`, gradients from :class:`FamilyGradientTap` on the family's
  visit modules, with what the family's forward must be told so that gradients reach every visit
  (:data:`GRADIENT_SETTINGS`; a visit that still runs without autograd is refused with the reason).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch

from sst_interp.interventions import Intervention, InterventionSpec, Operation, Site
from sst_interp.interventions.loops import FAMILY_STREAM, LoopIntervener, check_loop_spec, intervene_loop
from sst_interp.kernels.errors import UsageError
from sst_interp.model.loop_model import generate_looped
from sst_interp.model.observers import ObserverGroup


def family_of(model: Any) -> Any:
    """The :class:`~sst_interp.model.loop_declaration.LoopDeclaration` of a natively looping ``model`` (a
    :class:`~sst_interp.model.loop_model.LoopModel`); None for an SST (whose iterations are reruns of its own
    layers)."""
    loop = getattr(model, "loop", None)
    return loop if loop is not None and loop.visit_sites is not None else None


def visited_iterations(model: Any, depth: int) -> dict[int, tuple[int, ...]]:
    """{recorded layer: the iterations it is visited at ``depth``, ascending}: every layer at 1..depth for an SST;
    a family's from its declaration (a layer outside the loop: (1,))."""
    loop = family_of(model)
    if loop is None:
        return {layer: tuple(range(1, depth + 1)) for layer in range(int(model.num_layers))}
    found: dict[int, set[int]] = {layer: set() for layer in range(int(model.num_layers))}
    for iteration, layer in loop.visits(model.config, depth):
        found[layer].add(int(iteration))
    return {layer: tuple(sorted(iterations)) for layer, iterations in found.items()}


# ------------------------------------------------------------------------------------------------ window
def carrying_layers(model: Any) -> list[int]:
    """The recorded layers whose visits hand a carried state on (``loop.freeze_layers``): the axis a family's
    windows slide over. A family that declares none cannot run the window experiment (UsageError)."""
    loop = family_of(model)
    if loop.freeze_layers is None:
        raise UsageError(f"window: {loop.family} declares no layer that hands a carried state on (freeze_layers), "
                         f"so there is no state stream to deny")
    return list(loop.freeze_layers(model.config))


def denied_iterations(model: Any, depth: int) -> tuple[int, ...]:
    """The iterations whose carried state a family window keeps (freeze) or replaces (mean, resample):
    ``freeze_from .. depth-1``, so that iterations ``freeze_from+1 .. depth`` read no state of their own;
    UsageError when that is none."""
    loop = family_of(model)
    first = max(1, int(loop.freeze_from))
    if first >= depth:
        raise UsageError(f"window: {loop.family} carries no state before iteration {first} ({loop.freeze_meaning}), "
                         f"so at --depth {depth} no later iteration can be denied one; use --depth >= {first + 1}")
    return tuple(range(first, depth))


def check_window(model: Any, modes: Sequence[str], depth: int, size: int) -> None:
    """UsageError (one line) for a window sweep a family cannot run: ``zero`` (no blend input to zero), a depth with
    no iteration to deny, more layers per window than the family has carrying layers."""
    loop = family_of(model)
    if "zero" in modes:
        raise UsageError(f"window --mode/--controls zero zeroes state_in, the SST blend's input; {loop.family} has no "
                         f"blend, and zeroing a visit's output would remove its residual stream, not only the carried "
                         f"state: use freeze, mean or resample")
    denied_iterations(model, depth)
    layers = carrying_layers(model)
    if size > len(layers):
        raise UsageError(f"--size {size} exceeds the {len(layers)} layers of {loop.family} that carry a state "
                         f"({layers}: a family's windows slide over them)")


def window_spec(model: Any, layers: tuple[int, ...], depth: int, mode: str, clean: Path | None = None,
                full_positions: int | None = None) -> InterventionSpec:
    """The family's spec for a window of carrying ``layers`` at ``depth`` (module docstring): ``freeze`` there at
    :func:`denied_iterations`, or the clean run's mean (``mean``) / another question's (``resample``, seed 0)
    ``layer_out`` at the same visits of its ``full_positions`` first positions."""
    check_window(model, (mode,), depth, len(layers))
    iterations = denied_iterations(model, depth)
    if mode == "freeze":
        return InterventionSpec((Intervention(Site(FAMILY_STREAM, layers=layers, iterations=iterations),
                                              Operation("freeze")),))
    if clean is None or full_positions is None:
        raise UsageError(f"the {mode} window reads the clean run's states: pass clean and full_positions")
    site = Site(FAMILY_STREAM, layers=layers, iterations=iterations, positions=tuple(range(full_positions)))
    return InterventionSpec((Intervention(site, Operation(mode, run=str(clean), depth=depth,
                                                          seed=0 if mode == "resample" else None)),))


def check_spec_for(model: Any, spec: InterventionSpec) -> None:
    """Refuse (one line) a condition's spec the family cannot take, before the experiment records anything (the
    same check ``record --intervention`` makes, :func:`~sst_interp.interventions.loops.check_loop_spec`)."""
    check_loop_spec(spec, family_of(model), model.config, model.hidden_size)


# ------------------------------------------------------------------------------------------------ forced passes
def forced_generation(model: Any, prompts: list[list[int]], targets: Sequence[Any], depth: int, config: Any,
                      observer: Any, spec: InterventionSpec | None = None,
                      question_ids: Sequence[str | None] | None = None, gradients: bool = False) -> Any:
    """One generation of a family at ``depth`` whose tokens before each row's target are the target's prefix (the
    context the metric is read in), ``spec`` applied (its intervener hears every call before ``observer``)."""

    def force(position: int, chosen: torch.Tensor) -> torch.Tensor:
        token = chosen.clone()
        for row, target in enumerate(targets):
            if target is not None and position < target.position:
                token[row] = target.prefix[position]
        return token

    changing = intervene_loop(model, spec, question_ids) if spec is not None else nullcontext(None)
    with changing as intervener:
        listening = observer if intervener is None else ObserverGroup(intervener, observer)
        return generate_looped(model, prompts, depth, config, observer=listening, force=force, gradients=gradients)


# ------------------------------------------------------------------------------------------------ gradients
def _hrm_every_l_cycle(model: Any, depth: int) -> Iterator[None]:
    """HRM-Text runs all but the last ``L_bp_cycles`` L visits of an H-cycle under ``torch.no_grad`` (the k-step
    gradient trick of its training); attribution needs the total derivative, so every L visit keeps its graph."""
    inner = model.backbone.model
    before = inner.L_bp_cycles_padded
    inner.L_bp_cycles_padded = [int(model.config.L_cycles)] * int(depth)
    try:
        yield
    finally:
        inner.L_bp_cycles_padded = before


#: family -> ``(model, depth) -> context`` under which its forward keeps autograd on at every visit (a family
#: absent here runs as transformers wrote it; a visit that then runs without autograd is refused by the tap)
GRADIENT_SETTINGS: dict[str, Callable[[Any, int], Any]] = {
    "hrm_text": contextmanager(_hrm_every_l_cycle),
}


def gradients_everywhere(model: Any, depth: int) -> Any:
    """The context in which ``model``'s forward keeps a graph through every visit (:data:`GRADIENT_SETTINGS`)."""
    setting = GRADIENT_SETTINGS.get(family_of(model).family)
    return setting(model, depth) if setting is not None else nullcontext()


class FamilyGradientTap(LoopIntervener):
    """An empty spec's :class:`~sst_interp.interventions.loops.LoopIntervener` that adds a zero leaf [B, 1, d] to
    the last column of each wanted visit's output, so that dM/d(leaf) is dM/d``layer_out`` there (the SST's
    :class:`~sst_interp.experiments.attribution._GradientTap`, on the family's visit modules).

    Args:
        model: the :class:`~sst_interp.model.loop_model.LoopModel`.
        layers: the recorded layers attributed.
        last_position: the last generated position with a site (the last target).
    """

    def __init__(self, model: Any, layers: Sequence[int], last_position: int) -> None:
        super().__init__(model, InterventionSpec())
        self.layers = set(int(layer) for layer in layers)
        self.last_position = int(last_position)
        self.leaves: dict[tuple[int, int, int], torch.Tensor] = {}
        self.states: dict[tuple[int, int, int], torch.Tensor] = {}

    def _apply(self, stream: str, layer: int, value: torch.Tensor) -> torch.Tensor:
        if self._coords is None or layer not in self.layers:
            return value
        turn, position, iteration = self._coords
        if turn != 0 or position > self.last_position:
            return value
        if not torch.is_grad_enabled():
            # a leaf added here would reach nothing: the family's forward cut the graph at this visit
            raise UsageError(f"attribution: {self.model.loop.family}'s forward runs visit (iteration {iteration}, "
                             f"layer {layer}) without autograd, so no gradient reaches it through the loop, and "
                             f"sst_interp knows no setting that keeps it (GRADIENT_SETTINGS); verify sites by real "
                             f"patching (trace)")
        return tap_last_column(self.leaves, self.states, (position, iteration, layer), value)


def tap_last_column(leaves: dict[Any, torch.Tensor], states: dict[Any, torch.Tensor], key: Any,
                    value: torch.Tensor) -> torch.Tensor:
    """``value`` [B, T, d] with a zero leaf [B, 1, d] added to its last column, the leaf kept in ``leaves[key]``
    (its gradient is attribution's) and the column's value in ``states[key]`` (float64, on the CPU)."""
    leaf = torch.zeros_like(value[:, -1:, :], requires_grad=True)
    leaves[key] = leaf
    states[key] = value[:, -1, :].detach().to("cpu", torch.float64)
    last = value[:, -1:, :] + leaf
    return last if value.shape[1] == 1 else torch.cat([value[:, :-1, :], last], dim=1)
