"""Interventions on a natively looping family (HRM-Text, Inkling-2 Loop, Dory, a bring-your-own looped block), through
the same spec as an SST.

A family runs every iteration of a token inside one forward call, so the pass coordinates of the observer (turn,
position) are completed per visit: each hook on a visit module learns its (iteration, layer) from the call, exactly
as the recorder does (:attr:`~sst_interp.model.loop_declaration.LoopDeclaration.visit_sites`). The family's one stream is
``layer_out``, the visit's output, which is what a family run records at (turn, position, iteration, layer):

- ``zero``, ``add``, ``mean``, ``patch``, ``resample``, ``map``: the visit's output becomes the new value (the same
  arithmetic as for an SST, :meth:`Intervener._operate`); the next block, the carried state and the recorder read it;
- ``freeze``: the carried state is kept as the visit read it, and the visit's own output is unchanged
  (:attr:`~sst_interp.model.loop_declaration.LoopDeclaration.freeze_meaning`): on HRM-Text z_L or z_H after the stack's
  visit is the one the visit read; on Inkling-2 Loop the next pass's layer reads the messages this pass's layer
  read; on a looped block (Dory, bring your own: ``loop.pass_input``) the next pass's first layer reads the input
  this pass's first layer read.

The ``attention`` stream (a visit's attention pattern: ``patch`` from a live source row, ``set``, ``uniform``) is
carried out inside the visited layer's attention (:mod:`~sst_interp.interventions.attention`), at the visit's (turn,
position, iteration, layer).

Only the last column of a call is changed (at position 0, the prefill, the prompt's last token): the columns before
it are the prompt, which no site addresses. The exception is a ``freeze`` on Inkling-2 Loop or a looped block, which
keeps the carried state of every column of the call (the prompt's at the prefill): a later pass attends over the
earlier columns' caches of the same pass, so only a freeze of every column repeats the frozen pass exactly. The
intervener's hooks run before any other hook on the same module, so a recorder attached alongside records the
changed values.

Usage::

    with intervene_loop(model, spec, question_ids=ids) as intervener:
        generate_looped(model, prompts, depth, config, observer=ObserverGroup(intervener, recorder))
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from sst_interp.interventions.apply import Intervener
from sst_interp.interventions.attention import AttentionPatcher, attention_rules
from sst_interp.interventions.checks import check_spec
from sst_interp.interventions.spec import ATTENTION, Intervention, InterventionSpec
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.owned import OwnedHooks
from sst_interp.model.loops import hrm_address

#: the one stream of a family's visit (its output, as recorded)
FAMILY_STREAM = "layer_out"


def check_loop_spec(spec: InterventionSpec, loop: Any, config: Any, hidden_size: int) -> None:
    """Refuse (UsageError, one line) a spec the family cannot take, before anything loads or is written: what
    :func:`~sst_interp.interventions.checks.check_spec` refuses, a stream other than ``layer_out``, a layer the
    family never visits at a listed iteration (a layer outside the loop runs at iteration 1 only), and a freeze
    where no carried state leaves the visit (a layer outside ``loop.freeze_layers``, or an iteration before
    ``loop.freeze_from``)."""
    names = loop.layer_names(config)
    check_spec(spec, len(names), hidden_size)
    looped = set(loop.looped_layers(config))
    once = {layer: sorted({i for i, l in loop.visits(config, 1) if l == layer}) for layer in range(len(names))}
    carrying = set(loop.freeze_layers(config)) if loop.freeze_layers is not None else set()
    for number, item in enumerate(spec.interventions, 1):
        site, kind = item.site, item.operation.kind
        where = f"intervention {number} ({kind})"
        if site.stream not in (FAMILY_STREAM, ATTENTION):
            raise UsageError(f"{where}: stream {site.stream!r} is inside an SST layer; {loop.family} intervenes on "
                             f"{FAMILY_STREAM!r}, a visit's output, and on {ATTENTION!r}, its attention pattern")
        for layer in site.layers or ():
            if layer in looped or site.iterations is None:
                continue
            never = [i for i in site.iterations if i not in once[layer]]
            if never:
                raise UsageError(f"{where}: {loop.family} never loops layer {layer} ({names[layer]}): it runs at "
                                 f"iteration {', '.join(map(str, once[layer]))} only, not {never}; the looped "
                                 f"layers are {sorted(looped)}")
        if kind != "freeze":
            continue
        outside = [layer for layer in (site.layers or ()) if layer not in carrying]
        if outside:
            raise UsageError(f"{where}: layers {outside} hand no carried state on in {loop.family}; a freeze takes "
                             f"layers {sorted(carrying)} ({loop.freeze_meaning})")
        early = [i for i in (site.iterations or ()) if i < loop.freeze_from]
        if early:
            raise UsageError(f"{where}: {loop.family} has no carried state to keep at iteration {early}; a freeze "
                             f"takes iterations >= {loop.freeze_from} ({loop.freeze_meaning})")


class LoopIntervener(Intervener):
    """The observer and hooks that carry a spec out on a :class:`~sst_interp.model.loop_model.LoopModel` (see
    the module docstring). Install it with :func:`intervene_loop`.

    Args:
        model: the LoopModel (its declaration and config validate the spec).
        spec: what to change.
        question_ids: the question of each batch row (``patch``, ``resample``).
        functions: the Python functions ``map`` rules name (:class:`~sst_interp.interventions.apply.Intervener`).
    """

    def __init__(self, model: Any, spec: InterventionSpec, question_ids: Sequence[str | None] | None = None,
                 functions: Mapping[str, Callable[[torch.Tensor], torch.Tensor]] | None = None) -> None:
        self.model = model
        self._pass: tuple[int, int] | None = None  # (turn, position) of the forward call in progress
        self._carried: dict[Any, torch.Tensor] = {}  # per carried state, its latest value's last column
        self._carry_calls = 0
        super().__init__(model, spec, question_ids, functions=functions)
        loop = model.loop
        self._freeze_layers = set(loop.freeze_layers(model.config)) if loop.freeze_layers is not None else set()
        self.hooks = OwnedHooks()
        self._attention: AttentionPatcher | None = None

    def _validate(self) -> None:
        check_loop_spec(self.spec, self.model.loop, self.model.config, self.model.hidden_size)
        super()._validate()

    # ------------------------------------------------------------------------------------------ observer
    def on_pass_start(self, info: Any) -> None:
        """Observer: a forward call (every iteration of ``info.position``) begins."""
        if self._active is None:
            self.check_batch(int(info.active.shape[0]))
        self._pass = None if info.position is None else (int(info.turn), int(info.position))
        self._active = info.active
        self._depth = int(info.depth)
        self._carried.clear()
        self._carry_calls = 0

    def on_pass_end(self, info: Any, logits: torch.Tensor | None) -> None:
        """Observer: the call is over."""
        self._pass = None
        self._coords = None

    # ------------------------------------------------------------------------------------------ hooks
    def install(self) -> None:
        """Hook the family's visit modules and its carried-state modules, and for attention rules the visits'
        attention (:class:`~sst_interp.interventions.attention.AttentionPatcher`); removed by :meth:`remove`."""
        backbone = self.model.backbone
        try:
            if attention_rules(self.spec):
                self._attention = AttentionPatcher.for_loop(self, self.model).install()
            for module, address in self.model.loop.visit_sites(backbone):
                self.hooks.forward_with_kwargs(module, self._visit_hook(address), prepend=True)
            if any(item.operation.kind == "freeze" for item in self.spec.interventions):
                loop = self.model.loop
                install = _FREEZE_HOOKS.get(loop.family) or (_pass_input_freeze_hooks if loop.pass_input else None)
                if install is None:
                    raise UsageError(f"{self.model.loop.family} declares no carried state a freeze can keep")
                install(self, backbone)
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Remove every hook and restore the attention function (idempotent)."""
        self.hooks.close()
        if self._attention is not None:
            self._attention.close()
            self._attention = None

    def _at(self, iteration: int) -> bool:
        """Set the coordinates of a visit of ``iteration`` in the call in progress; False outside a token's call."""
        if self._pass is None:
            self._coords = None
            return False
        self._coords = (*self._pass, int(iteration))
        return True

    def _visit_hook(self, address: Callable[[dict[str, Any]], tuple[int, int]]):
        def hook(module: nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> Any:
            iteration, layer = address(kwargs)
            if not self._at(iteration):
                return None
            for item in self.frozen(layer):  # counted at the visit whose carried state it keeps
                self._count(item, self._active_rows())
            value = output[0] if isinstance(output, tuple) else output
            changed = self._apply(FAMILY_STREAM, layer, value)
            self._coords = None
            if changed is value:
                return None
            return (changed, *output[1:]) if isinstance(output, tuple) else changed

        return hook

    def frozen(self, layer: int) -> list[Intervention]:
        """The freeze rules at the current coordinates and ``layer`` (none where the family hands no state on)."""
        if self._coords is None or layer not in self._freeze_layers or self._coords[2] < self.model.loop.freeze_from:
            return []
        return [item for item in self._matching(FAMILY_STREAM, layer) if item.operation.kind == "freeze"]

    def keep(self, key: Any, read: torch.Tensor | None, layer: int, iteration: int, output: torch.Tensor,
             every_column: bool = False) -> Any:
        """The carried state ``key`` leaves a visit of (``iteration``, ``layer``) as ``output`` [B, T, ...]: where a
        freeze rule matches, its last column becomes ``read`` (the state the visit read, [B, ...]), or with
        ``every_column`` all of it does (``read`` [B, T, ...]: a family whose later iterations attend over the
        earlier columns' caches of the same iteration, which must be frozen too for the freeze to repeat an
        iteration exactly). Remembers what leaves, for the next visit to read. Returns the replacement output, or
        None for unchanged."""
        frozen = self._at(iteration) and bool(self.frozen(layer))
        self._coords = None
        if frozen and read is None:
            raise AssertionError(f"a freeze at iteration {iteration}, layer {layer} found no state the visit read")
        if not frozen:
            self._carried[key] = (output if every_column else output[:, -1]).detach()
            return None
        changed = output.clone()
        if every_column:
            changed[...] = read.to(changed.dtype)
        else:
            changed[:, -1] = read.to(changed.dtype)
        self._carried[key] = read
        return changed


@contextmanager
def intervene_loop(model: Any, spec: InterventionSpec, question_ids: Sequence[str | None] | None = None,
                   functions: Mapping[str, Callable[[torch.Tensor], torch.Tensor]] | None = None
                   ) -> Iterator[LoopIntervener]:
    """A :class:`LoopIntervener` on ``model`` for the block (its hooks removed on exit, also on error); pass it to
    :func:`~sst_interp.model.loop_model.generate_looped` as the observer, before a recorder in an
    :class:`~sst_interp.model.observers.ObserverGroup`. ``functions``: those ``map`` rules name."""
    intervener = LoopIntervener(model, spec, question_ids, functions)
    intervener.install()
    try:
        yield intervener
    finally:
        intervener.remove()


# ------------------------------------------------------------------------------------------------ freezes
def _hrm_freeze_hooks(intervener: LoopIntervener, backbone: nn.Module) -> None:
    """HRM-Text: z_L and z_H are the L and H stacks' outputs (final-normed). A stack's forward hook sees what the
    visit hands on; the state it read is the previous output of the same stack in this call, or the initial state
    (z_L_init; the token embedding times embedding_scale, recomputed here with the model's own operation)."""

    inner, config = backbone.model, backbone.config
    last = int(config.num_layers_per_stack) - 1

    def embedding(module: nn.Module, args: Any, output: torch.Tensor) -> None:
        intervener._carried["H"] = (output * inner.embedding_scale)[:, -1].detach()

    def stack(key: str) -> Callable[..., Any]:
        def hook(module: nn.Module, args: Any, kwargs: dict[str, Any], output: torch.Tensor) -> Any:
            iteration, layer = hrm_address(config, last, int(kwargs.get("cycle_offset", 0)))
            read = intervener._carried.get(key)
            if read is None and key == "L":
                read = inner.z_L_init.to(dtype=output.dtype, device=output.device).expand(output.shape[0], -1)
            return intervener.keep(key, read, layer, iteration, output)

        return hook

    intervener.hooks.forward(inner.embed_tokens, embedding)
    intervener.hooks.forward_with_kwargs(inner.L_module, stack("L"), prepend=True)
    intervener.hooks.forward_with_kwargs(inner.H_module, stack("H"), prepend=True)


def _inkling_freeze_hooks(intervener: LoopIntervener, backbone: nn.Module) -> None:
    """Inkling-2 Loop: pass p >= 2 reads pass p - 1 through ``message_input``, called once per looped layer in
    order, pass after pass. A freeze at (pass p, layer l) gives pass p + 1's call for layer l the messages pass p's
    call returned, at every column of the call: pass p + 1 of the last column attends over the earlier columns'
    pass-(p + 1) KV and conv caches (the prompt's, written by the prefill), and only when those columns repeat pass
    p too does the frozen model answer exactly as at depth p (docs/families.md)."""
    config = backbone.config
    start = int(config.loop_layer_index_start)
    looped = int(config.loop_layer_index_end) - start

    def hook(module: nn.Module, args: Any, kwargs: dict[str, Any], output: torch.Tensor) -> Any:
        call = intervener._carry_calls
        intervener._carry_calls += 1
        index = args[2] if len(args) > 2 else kwargs["loop_layer_idx"]
        reading, offset = call // looped + 2, call % looped  # this call feeds pass `reading`, looped layer `offset`
        if int(index) != offset:
            raise AssertionError(f"Inkling-2 Loop message call {call} is for looped layer {index}, expected "
                                 f"{offset}: transformers' loop order changed")
        # the state pass `reading` receives is what pass `reading - 1` handed on; a freeze there keeps what that
        # pass itself read
        return intervener.keep(offset, intervener._carried.get(offset), start + offset, reading - 1, output,
                               every_column=True)

    intervener.hooks.forward_with_kwargs(backbone.model.message_input, hook, prepend=True)


def _pass_input_freeze_hooks(intervener: LoopIntervener, backbone: nn.Module) -> None:
    """A looped block (Dory, a bring-your-own model: ``loop.pass_input``): every pass reads the state the previous one
    handed on through the input of the block's first layer, called once per pass. A freeze at (pass p, the block's
    last layer) gives pass p + 1's call the input pass p's call got, at every column of the call (a later pass
    attends over the earlier columns' caches of its own pass, which must repeat pass p too). The call's pass is
    counted in the forward call (the model runs the block ``depth`` times per call, the ``looped_block`` contract)."""
    loop, config = intervener.model.loop, backbone.config
    (layer,) = loop.freeze_layers(config)

    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call = intervener._carry_calls
        intervener._carry_calls += 1
        reading = call % int(getattr(config, loop.depth_key)) + 1  # the pass this call runs
        hidden = args[0] if args else kwargs["hidden_states"]
        # what pass `reading` reads was handed on by pass `reading - 1`; a freeze there keeps what that pass read
        changed = intervener.keep("pass_input", intervener._carried.get("pass_input"), layer, reading - 1, hidden,
                                  every_column=True)
        if changed is None:
            return None
        return ((changed, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": changed})

    intervener.hooks.forward_pre_with_kwargs(loop.pass_input(backbone), hook, prepend=True)


#: family -> installs the hooks that keep a carried state where a freeze rule matches (a family not listed, with a
#: ``pass_input``, gets :func:`_pass_input_freeze_hooks`)
_FREEZE_HOOKS: dict[str, Callable[[LoopIntervener, nn.Module], None]] = {
    "hrm_text": _hrm_freeze_hooks,
    "inkling2_loop": _inkling_freeze_hooks,
}
