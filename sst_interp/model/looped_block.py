"""A looped block declared by module path (:func:`looped_block`): the declaration of a model whose layers run once,
except one contiguous block that runs ``depth`` times per token inside one forward call (Dory, Huginn-style
recurrent-depth models, a model of your own: docs/bring-your-own.md).

Everything is named by module path and the pass of a looped layer's call is counted, not read from keywords the
model passes (:class:`_PassCounter`), so one builder serves a family transformers ships and a user's ``--loop`` file.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from torch import nn

from sst_interp.kernels.errors import UsageError
from sst_interp.model.loop_declaration import LoopDeclaration


def resolve_module(model: Any, path: str) -> Any:
    """The submodule of ``model`` at dotted ``path`` (``model.layers.3``); a :class:`UsageError` naming the first
    part that is missing and what the module there holds instead."""
    module = model
    for depth, part in enumerate(path.split(".")):
        child = module._modules.get(part) if hasattr(module, "_modules") else None
        if child is None:
            have = sorted(getattr(module, "_modules", {}))[:12]
            raise UsageError(f"no module {path!r} in the model: {'.'.join(path.split('.')[:depth]) or 'the model'} "
                             f"has no {part!r} (it has {', '.join(have) or 'no submodules'})")
        module = child
    return module


def declared(family: str, what: str, function: Callable[[Any], Any], config: Any) -> Any:
    """``function(config)``: a declaration's own code (its ``layers`` or ``looped``) on the model's config. Its
    failure is the declaration's fault, so it is a :class:`UsageError`: a config field the config lacks is named
    with the nearest fields it has; any other error is named with its type."""
    try:
        return function(config)
    except UsageError:
        raise
    except AttributeError as err:
        field = getattr(err, "name", None) or str(err)
        near = difflib.get_close_matches(str(field), sorted(vars(config)), n=3)
        raise UsageError(f"{family}: the declaration's {what}(config) reads config field {field!r}, which the model's "
                         f"config ({type(config).__name__}) does not have"
                         f"{' (did you mean ' + ', '.join(near) + '?)' if near else ''}; fix the declaration") \
            from err
    except Exception as err:  # the user's code: any failure is bad input, named with its type
        raise UsageError(f"{family}: the declaration's {what} failed on the model's config "
                         f"({type(config).__name__}): {type(err).__name__}: {err}") from err


class _PassCounter:
    """Which iteration a call of a looped layer is: its calls counted since the model's first non-looped layer last
    ran, modulo the depth in force (the model's config field). Every forward call runs each looped layer exactly
    ``depth`` times, so the count is exact whichever keywords the model passes; one counter per set of hooks, so
    the recorder's and an intervener's hooks each count their own calls."""

    def __init__(self, model: Any, depth_key: str) -> None:
        self.model, self.depth_key, self.calls = model, depth_key, {}

    def restart(self) -> None:
        """A new forward call began (its first layer ran)."""
        self.calls.clear()

    def next(self, layer: int) -> int:
        """The iteration (1-based) of this call of looped ``layer``."""
        count = self.calls.get(layer, 0)
        self.calls[layer] = count + 1
        return count % int(getattr(self.model.config, self.depth_key)) + 1


def looped_block(*, family: str, layers: Callable[[Any], list[str]], looped: Callable[[Any], tuple[int, int]],
                 depth_key: str, head: str, norm: str | None = None, model_types: tuple[str, ...] = (),
                 carries: str = "the looped block's output feeds its next pass", depth_meaning: str | None = None,
                 max_depth: int | None = None, lens_is_output: bool = False,
                 settings: Callable[[Any], dict[str, Any]] | None = None, options: tuple[str, ...] = (),
                 title: str = "", exact_dtype: str = "float32") -> LoopDeclaration:
    """The declaration of a model whose layers run once, except one contiguous block that runs ``depth`` times per
    token inside one forward call (a prelude, a looped core, a coda: Dory, Huginn-style recurrent-depth models,
    ...). Everything is named by module path, so one declaration serves a family transformers ships and a model
    of your own (docs/bring-your-own.md).

    Args:
        family: the short name written into manifests.
        layers: ``config -> [module path of every layer, in the order one pass runs them]``; these are the
            recorded layer axis (a visit is a layer's output, the first element when it returns a tuple).
        looped: ``config -> (start, end)``: ``layers[start:end]`` run ``depth`` times per token, in order, pass
            after pass; the others once.
        depth_key: the config field the model reads its pass count from at every forward call (``--depths``).
        head: module path of the LM head; the lens is ``head(norm(output of the block's last layer))`` per pass.
        norm: module path of the final norm the model applies before ``head`` (None: none).
        model_types: the ``config.model_type`` values it serves (a bring-your-own declaration may leave it empty).
        carries: what carries from one pass to the next (prose).
        depth_meaning: what a depth means (prose; default: passes of the looped block, from ``depth_key``).
        max_depth: the largest depth the model can run (None: any).
        lens_is_output: True only when nothing runs after the block, so the last pass's lens is the model's own
            distribution.
        settings: config -> the settings to write into the manifest (see :class:`LoopDeclaration`).
        options: the config fields a user may set at inference with ``--loop-option KEY=VALUE`` (see
            :class:`LoopDeclaration`).
        title: display name.
        exact_dtype: the dtype its exactness tests run in (for the families table).
    """
    if not callable(layers) or not callable(looped) or not isinstance(depth_key, str) or not isinstance(head, str):
        raise UsageError(f"{family}: looped_block needs layers (config -> module paths), looped (config -> (start, "
                         f"end)), depth_key (a config field name) and head (a module path)")

    def names_of(config: Any) -> list[str]:
        return list(declared(family, "layers", layers, config))

    def block(config: Any) -> tuple[int, int, int]:
        names = names_of(config)
        start, end = (int(x) for x in declared(family, "looped", looped, config))
        if not 0 <= start < end <= len(names):
            raise UsageError(f"{family}: the looped block {start}..{end - 1} is not within the {len(names)} layers "
                             f"declared ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''})")
        return start, end, len(names)

    def visits(config: Any, depth: int) -> list[tuple[int, int]]:
        start, end, total = block(config)
        return ([(1, layer) for layer in range(start)]
                + [(p, layer) for p in range(1, depth + 1) for layer in range(start, end)]
                + [(1, layer) for layer in range(end, total)])

    def visit_sites(model: Any) -> list[tuple[Any, Callable[[dict[str, Any]], tuple[int, int]]]]:
        start, end, _ = block(model.config)
        counter = _PassCounter(model, depth_key)
        sites = []
        for index, path in enumerate(names_of(model.config)):
            module = resolve_module(model, path)
            if start <= index < end:
                sites.append((module, lambda kwargs, index=index: (counter.next(index), index)))
            elif index == 0:
                sites.append((module, lambda kwargs: (counter.restart(), (1, 0))[1]))
            else:
                sites.append((module, lambda kwargs, index=index: (1, index)))
        return sites

    def lens_sites(model: Any) -> list[tuple[Any, Callable[[dict[str, Any]], int]]]:
        _, end, _ = block(model.config)
        counter = _PassCounter(model, depth_key)
        # every forward call runs the block's last layer exactly `depth` times, so its calls counted modulo the depth
        # are the passes (the recorder counts the lens's calls itself; the trace check holds this count to them)
        return [(resolve_module(model, names_of(model.config)[end - 1]), lambda kwargs: counter.next(end - 1))]

    def lens_head(model: Any, state: Any) -> Any:
        normed = resolve_module(model, norm)(state) if norm else state
        return resolve_module(model, head)(normed)

    def check_model(model: Any) -> None:
        start, end, _ = block(model.config)
        missing = []
        for path in [*names_of(model.config), head, *([norm] if norm else [])]:
            try:
                resolve_module(model, path)
            except UsageError:
                missing.append(path)
        if missing:
            raise UsageError(f"{family}: the declaration's modules are not in the model: looked for "
                             f"{', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''} "
                             f"(top-level modules: {', '.join(sorted(model._modules))})")
        if not hasattr(model.config, depth_key):
            raise UsageError(f"{family}: the model's config has no field {depth_key!r} (the declared depth_key)")
        absent = [name for name in options if not hasattr(model.config, name)]
        if absent:
            raise UsageError(f"{family}: the model's config has no field {', '.join(map(repr, absent))} (declared "
                             "in options)")

    return LoopDeclaration(
        family=family, model_types=tuple(model_types), carries=carries,
        depth_meaning=depth_meaning or f"passes of the looped block per token (config {depth_key}); the layers "
                                       "before and after it run once",
        depth_key=depth_key, max_depth=max_depth,
        exits="after any pass of the looped block (the lens reads its output there)",
        lens=(f"{norm + ' then ' if norm else ''}{head} on the looped block's output after each pass"
              + ("" if lens_is_output else " (a logit lens: the layers after the block do not run for it, so the "
                                           "last pass's reading is not the model's own distribution)")),
        layer_names=names_of, visits=visits, visit_sites=visit_sites,
        lens_sites=lens_sites, lens_head=lens_head,
        state_layer=lambda config: block(config)[1] - 1,
        # the state a pass hands on is the block's last layer's output, and the next pass reads it through the
        # block's first layer: a freeze gives that layer, in pass p + 1, what it got in pass p
        freeze_layers=lambda config: [block(config)[1] - 1], freeze_from=1,
        freeze_meaning="at the looped block's last layer and pass p, pass p + 1 reads the state pass p read: the "
                       "block's first layer gets, at every column of the call, the input it got in pass p (pass 1's: "
                       "made from what the layers before the block handed on); the layer's own output, recorded, is "
                       "unchanged. The pass after a frozen one repeats it: frozen at passes p..D - 1 (or at one pass "
                       "p < D), the model answers as at depth p (D - 1), where a pass reads nothing else that "
                       "differs between passes (Dory: each loop's own KV cache, or the last loop's)",
        pass_input=lambda model: resolve_module(model, names_of(model.config)[block(model.config)[0]]),
        lens_norm=(lambda model: resolve_module(model, norm)) if norm else (lambda model: nn.Identity()),
        lens_is_output=lens_is_output, settings=settings, options=tuple(options), check_model=check_model, title=title or family,
        layer_meaning="the layers, in the order one pass runs them", exact_dtype=exact_dtype,
        iterations_meaning="D for the looped block, 1 elsewhere")
