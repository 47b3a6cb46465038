"""The trace check: a loop declaration is verified against the running model before anything is recorded with it.

A declaration (:class:`~sst_interp.model.loop_declaration.LoopDeclaration`) predicts, for every depth, the sequence
of visits one token makes (:attr:`~sst_interp.model.loop_declaration.LoopDeclaration.visits`). The check runs the
loaded model on a short input at two depths (:data:`TRACE_DEPTHS`), a prefill and one cached decoding step each,
records every call of the declared modules with forward hooks (owned, and removed when it is done), and compares:

- every declared layer is called;
- no undeclared layer (a sibling of a declared one, or a module of a declared one's class) runs between the loop's
  visits;
- the layers run in the declared order, each as many times as declared;
- the number of visits changes with the depth key exactly as declared;
- the declaration's own iteration numbers (its addresses, its lens) are the counted ones, and the lens reads one
  state per iteration.

Any difference is one :class:`~sst_interp.kernels.errors.UsageError` line naming it. The recorder files every visit
under the iteration it observes (:class:`~sst_interp.hooks.visits.VisitRecorder`), so a declaration that passes is
the run's true layout. Every family recorded through its declared modules is checked, the native ones too (a
transformers release that changes a model's loop is caught); an SST records through its own layers.

:func:`trace_key` names what a passed check depends on (the folder's config, code and weight files, the
declaration's code, the settings, the library versions), so that a resumed run does not pay for it again.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import transformers
from torch import nn

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.owned import OwnedHooks
from sst_interp.model.loop_declaration import LoopDeclaration
from sst_interp.model.loops import LOOPS

#: The depths the check runs at: the visit counts must change between them exactly as declared.
TRACE_DEPTHS = (1, 2)
#: Tokens of the check's input (its prefill), then one cached decoding step.
TRACE_TOKENS = 4
#: Bumped when what the check verifies changes, so that an earlier pass is not reused.
TRACE_VERSION = 1
#: The package modules whose code a declaration is made of (with a user's ``--loop`` file).
_DECLARATION_MODULES = ("loop_declaration.py", "looped_block.py", "loops.py", "loop_trace.py")
_CONTAINERS = (nn.ModuleList, nn.ModuleDict, nn.Sequential)


@dataclass
class _Call:
    """What one forward call ran, in order: ``("visit", layer, declared iteration)``, ``("lens", declared
    iteration)`` and ``("other", module name)`` events."""

    events: list[tuple[Any, ...]] = field(default_factory=list)

    def layers(self) -> list[int]:
        return [event[1] for event in self.events if event[0] == "visit"]


@dataclass(frozen=True)
class TraceResult:
    """A passed check: the depths it ran at, the visits of one token at each, and the input's length.

    Attributes:
        depths: :data:`TRACE_DEPTHS` (the first alone for a family that runs no deeper).
        visits: ``{depth: visits per token}``, as observed (and declared).
    """

    depths: tuple[int, ...]
    visits: dict[int, int]

    def to_manifest(self, key: str) -> dict[str, Any]:
        """The manifest's ``loop.trace``: the key it holds for, the depths, the visits per token at each."""
        return {"key": key, "depths": list(self.depths), "tokens": TRACE_TOKENS,
                "visits_per_token": {str(depth): count for depth, count in self.visits.items()}}


def check_loop_trace(model: Any) -> TraceResult:
    """Run ``model`` (a :class:`~sst_interp.model.loop_model.LoopModel`) at the trace depths and refuse
    (UsageError, one line) a declaration that the calls do not follow (see the module docstring)."""
    loop = model.loop
    depths = tuple(d for d in TRACE_DEPTHS if loop.max_depth is None or d <= loop.max_depth)
    names = loop.layer_names(model.config)
    calls: dict[int, list[_Call]] = {}
    predicted: dict[int, list[tuple[int, int]]] = {}
    for depth in depths:
        with model.at_depth(depth):
            predicted[depth] = loop.visits(model.config, depth)
            calls[depth] = _traced_calls(model)
    problem = _first_problem(loop, names, set(loop.looped_layers(model.config)), depths, calls, predicted)
    if problem is not None:
        raise UsageError(_refusal(loop, depths, problem))
    return TraceResult(depths=depths, visits={depth: len(predicted[depth]) for depth in depths})


def _refusal(loop: LoopDeclaration, depths: tuple[int, ...], problem: str) -> str:
    where = f"traced on {TRACE_TOKENS} tokens at depths {' and '.join(map(str, depths))}"
    if any(loop is native for native in LOOPS):
        fix = (f"transformers {transformers.__version__} does not run {loop.family} as sst-interp declares it; "
               "install the transformers release sst-interp was tested with")
    else:
        fix = "fix the declaration (docs/bring-your-own.md)"
    return f"{loop.family}: the loop declaration does not match the running model ({where}): {problem}; {fix}"


def _traced_calls(model: Any) -> list[_Call]:
    """The events of a prefill of :data:`TRACE_TOKENS` tokens and one cached decoding step, at the depth in force."""
    loop, backbone = model.loop, model.backbone
    vocab = int(backbone.get_input_embeddings().weight.shape[0])
    ids = torch.tensor([[(3 + 7 * i) % vocab for i in range(TRACE_TOKENS)]], device=model.device)
    mask = torch.ones_like(ids)
    positions = torch.arange(TRACE_TOKENS, device=model.device)[None]
    calls: list[_Call] = []
    sites = loop.visit_sites(backbone)
    declared = [module for module, _ in sites]
    with OwnedHooks() as hooks, torch.no_grad():
        for module, address in sites:
            hooks.forward_with_kwargs(module, _visit_hook(calls, address))
        for module, iteration in loop.lens_sites(backbone):
            hooks.forward_with_kwargs(module, _lens_hook(calls, iteration))
        for name, module in _undeclared_layers(backbone, declared):
            hooks.forward(module, _other_hook(calls, name))
        calls.append(_Call())
        logits, cache = model.forward_logits(ids, mask, positions, None)
        calls.append(_Call())
        step = logits.argmax(-1)[:, None]
        model.forward_logits(step, torch.cat([mask, torch.ones_like(step)], 1), positions[:, -1:] + 1, cache)
    return calls


def _visit_hook(calls: list[_Call], address: Any) -> Any:
    def hook(module: nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        iteration, layer = address(kwargs)
        calls[-1].events.append(("visit", int(layer), int(iteration)))

    return hook


def _lens_hook(calls: list[_Call], iteration_of: Any) -> Any:
    def hook(module: nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        calls[-1].events.append(("lens", int(iteration_of(kwargs))))

    return hook


def _other_hook(calls: list[_Call], name: str) -> Any:
    def hook(module: nn.Module, args: Any, output: Any) -> None:
        calls[-1].events.append(("other", name))

    return hook


def _undeclared_layers(backbone: nn.Module, declared: list[nn.Module]) -> list[tuple[str, nn.Module]]:
    """The modules that look like layers but are not declared: the other entries of a container (ModuleList, ...)
    that holds a declared layer, and every module of a declared layer's class; none inside or around a declared
    one."""
    ids = {id(module) for module in declared}
    classes = {type(module) for module in declared}
    names = {id(module): name for name, module in backbone.named_modules()}
    declared_names = [names[id(module)] for module in declared if id(module) in names]
    found: dict[str, nn.Module] = {}
    for name, module in backbone.named_modules():
        children = list(module.named_children())
        if isinstance(module, _CONTAINERS) and any(id(child) in ids for _, child in children):
            found.update({f"{name}.{child_name}" if name else child_name: child
                          for child_name, child in children if id(child) not in ids})
        elif type(module) in classes and id(module) not in ids:
            found[name] = module

    def related(name: str) -> bool:
        return any(name.startswith(other + ".") or other.startswith(name + ".") for other in declared_names)

    return [(name, module) for name, module in found.items() if not related(name)]


def _first_problem(loop: LoopDeclaration, names: list[str], looped: set[int], depths: tuple[int, ...],
                   calls: dict[int, list[_Call]], predicted: dict[int, list[tuple[int, int]]]) -> str | None:
    """The first difference between the calls and the declaration, by kind (a layer never called, an undeclared
    layer inside the loop, a depth key the model does not read, a count, the order, the numbering), or None."""

    def place(layer: int) -> str:
        return "in the loop" if layer in looped else "outside the loop"

    def name(layer: int) -> str:
        return names[layer] if 0 <= layer < len(names) else f"#{layer}"

    for depth in depths:
        for call in calls[depth]:
            beyond = sorted({layer for layer in call.layers() if not 0 <= layer < len(names)})
            if beyond:
                return (f"the declaration addresses a call as layer {beyond[0]}, beyond its {len(names)} layers "
                        f"({', '.join(names[:4])}{', ...' if len(names) > 4 else ''})")
    never: dict[int, list[int]] = {}
    for depth in depths:
        have = Counter(calls[depth][0].layers())
        for layer in sorted({layer for _, layer in predicted[depth]}):
            if not have[layer]:
                never.setdefault(layer, []).append(depth)
    if never:
        layer, found = min(never.items())
        at = f"depth {found[0]}" if len(found) == 1 else f"depths {' and '.join(map(str, found))}"
        return f"layer {name(layer)} is declared {place(layer)} but was never called at {at}"
    for depth in depths:
        for call in calls[depth]:
            problem = _undeclared_inside(call, looped, name, depth)
            if problem is not None:
                return problem
    observed = {depth: [len(call.layers()) for call in calls[depth]] for depth in depths}
    if len(depths) > 1:
        first, second = depths[0], depths[-1]
        if observed[first][0] == observed[second][0] and len(predicted[first]) != len(predicted[second]):
            return (f"depth_key {loop.depth_key} did not change the number of visits ({observed[first][0]} at "
                    f"depth {first} and {second}; declared {len(predicted[first])} and {len(predicted[second])})")
    for depth in depths:
        want = Counter(layer for _, layer in predicted[depth])
        for number, call in enumerate(calls[depth]):
            have = Counter(call.layers())
            for layer in range(len(names)):
                if have[layer] != want[layer]:
                    return _count_problem(name(layer), layer in looped, depth, have[layer], want[layer],
                                          number == 1, calls, layer, depths)
    for depth in depths:
        order = [layer for _, layer in predicted[depth]]
        for number, call in enumerate(calls[depth]):
            seen = call.layers()
            if seen != order:
                at = next(i for i, (a, b) in enumerate(zip(seen, order)) if a != b)
                return (f"at depth {depth}{' (a cached decoding step)' if number else ''}, call {at + 1} of "
                        f"{len(order)} was {name(seen[at])} where the declared order has {name(order[at])} "
                        f"(declared: {_listed(order, name)}; called: {_listed(seen, name)})")
    for depth in depths:
        for call in calls[depth]:
            problem = _numbering_problem(call, predicted[depth], name, depth)
            if problem is not None:
                return problem
    return None


def _listed(layers: list[int], name: Any, most: int = 8) -> str:
    shown = [name(layer) for layer in layers[:most]]
    return ", ".join(shown) + (f", ... ({len(layers)} calls)" if len(layers) > most else "")


def _undeclared_inside(call: _Call, looped: set[int], name: Any, depth: int) -> str | None:
    """An undeclared layer called between the first and the last visit of a looped layer in ``call``."""
    inside = [n for n, event in enumerate(call.events) if event[0] == "visit" and event[1] in looped]
    if not inside:
        return None
    for event in call.events[inside[0]:inside[-1]]:
        if event[0] == "other":
            return (f"layer {event[1]} runs between the loop's visits at depth {depth} but is not declared (add it "
                    "to the declaration's layers, in the order one pass runs them)")
    return None


def _count_problem(layer_name: str, in_loop: bool, depth: int, have: int, want: int, cached: bool,
                   calls: dict[int, list[_Call]], layer: int, depths: tuple[int, ...]) -> str:
    """A layer called another number of times than declared, with what its counts across the depths suggest."""
    counts = [Counter(calls[d][0].layers())[layer] for d in depths]
    hint = ""
    if in_loop and len(set(counts)) == 1:
        hint = "; it does not repeat with the depth: the looped block is declared too long (or the depth key is " \
               "not what the model reads)"
    elif not in_loop and len(set(counts)) > 1:
        hint = "; it repeats with the depth: declare it inside the looped block"
    return (f"layer {layer_name} was called {have} time{'s' if have != 1 else ''} at depth {depth}"
            f"{' (a cached decoding step)' if cached else ''} but is declared {'in' if in_loop else 'outside'} "
            f"the loop to run {want} time{'s' if want != 1 else ''}{hint}")


def _numbering_problem(call: _Call, predicted: list[tuple[int, int]], name: Any, depth: int) -> str | None:
    """The declaration's own iteration numbers against the counted ones: its visit addresses, then its lens."""
    seen: Counter[int] = Counter()
    for event in call.events:
        if event[0] != "visit":
            continue
        seen[event[1]] += 1
        if event[2] != seen[event[1]]:
            return (f"the declaration numbers call {seen[event[1]]} of layer {name(event[1])} at depth {depth} as "
                    f"iteration {event[2]}")
    lens = [event[1] for event in call.events if event[0] == "lens"]
    if len(lens) != depth:
        return (f"the lens read {len(lens)} state{'s' if len(lens) != 1 else ''} at depth {depth}, one per "
                f"iteration is {depth}")
    if lens != list(range(1, depth + 1)):
        return f"the declaration numbers the lens readings at depth {depth} as {lens}, not 1..{depth}"
    return None


def declaration_sha256(loop_file: str | Path | None = None) -> str:
    """The sha256 of what a declaration is made of: the package's declaration modules and, for a user's
    declaration, its ``--loop`` file (``FILE.py``; a ``FILE.py:NAME`` spec is read as its file)."""
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for module in _DECLARATION_MODULES:
        digest.update(module.encode() + b"\0" + (here / module).read_bytes())
    if loop_file is not None:
        path = Path(str(loop_file).rpartition(":")[0] or str(loop_file))
        digest.update(b"loop\0" + path.read_bytes())
    return digest.hexdigest()


def trace_key(folder: str | Path, declaration: str, settings: dict[str, Any]) -> str:
    """The key of a passed check on ``folder``'s model: its config and code files' bytes, its other files' names,
    sizes and modification times (the weights, without reading them), ``declaration``
    (:func:`declaration_sha256`), the loop ``settings`` and the torch and transformers versions."""
    digest = hashlib.sha256(json.dumps({"version": TRACE_VERSION, "declaration": declaration, "settings": settings,
                                        "torch": torch.__version__, "transformers": transformers.__version__},
                                       sort_keys=True, default=str).encode())
    root = Path(folder)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        relative = path.relative_to(root).as_posix()
        if path.suffix in (".json", ".py"):
            digest.update(relative.encode() + b"\0" + path.read_bytes())
        else:
            stat = path.stat()
            digest.update(f"{relative}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    return digest.hexdigest()
