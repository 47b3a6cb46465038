"""Attention-pattern interventions: the post-softmax weights of chosen heads replaced inside the attention
computation, at (turn, position, iteration, layer) sites (the ``attention`` stream of
:mod:`~sst_interp.interventions.spec`; operations ``patch`` from a live source row, ``set``, ``uniform``).

Every attention module of the families (Gemma 3 under the SST, HRM-Text, Inkling-2 Loop, Dory) computes its query,
key and value (projections, norms, rotary embedding, cache) and hands them to one attention function, which returns
(output, weights); the module then applies its output projection. While an intervention with attention rules is
installed, that function is wrapped (:class:`~sst_interp.hooks.attention_weights.KernelSwap`: under eager the
modeling module's ``eager_attention_forward``, under sdpa the registry entry; owned, restored on exit, also on an
exception). At a call that is a site, the wrapper runs the family's own kernel, takes the weights of the last query
column, ``w`` [B, H, K] (eager returns them; sdpa returns none, so they are computed from the kernel's own query and
key by eager's arithmetic, :func:`~sst_interp.hooks.attention_weights.weights_from_qk`, its softmax in the wider of
the query's dtype and float32), replaces the (row, head)
entries its rules change, ``w -> w'``, and hands the module ``w' @ V``:

- eager: the kernel's whole weights tensor with its last query column replaced, times the same V, by the same
  matmul the kernel ran, so a pattern replaced by itself gives the kernel's output bit for bit;
- sdpa: the kernel's output, with the last column of each changed (row, head) replaced by ``w' @ V`` (sdpa's fused
  arithmetic is not eager's: a pattern replaced by itself gives its output to rounding).

The module returns ``w'``, so a recorder of attention alongside records the pattern the layer used. Only the last
query column changes: the pass's own column (at position 0 the prompt's last token, the answer column; the columns
before it are the prompt, which no site addresses). A key is named by its index in the row's own context (prompt
tokens from 0, then every token fed after them; :func:`~sst_interp.hooks.attention.key_index`), as ``record
--attention`` names it; the keys a query attends to exclude padding, finished rows' columns and keys beyond a
sliding window. Where a site is: on an SST the pass's (turn, position, iteration) and the layer's index; on a looped
family, the visit's (iteration, layer), read by a pre-hook on the visited layer from the declaration's own address
(:attr:`~sst_interp.model.loop_declaration.LoopDeclaration.visit_sites`, its own counter).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from sst_interp.hooks.attention import attention_heads, attention_module, context_index, key_index
from sst_interp.hooks.attention_weights import READABLE, KernelSwap, implementation, weights_from_qk
from sst_interp.interventions.spec import ATTENTION, InterventionSpec, toward
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.owned import OwnedHooks

#: what needed a model's attention, for the messages of :mod:`sst_interp.hooks.attention`
USER = "the attention intervention"
#: (turn, position, iteration, layer) of an attention call
Where = tuple[int, int, int, int]


def attention_rules(spec: InterventionSpec) -> list[tuple[int, Any]]:
    """(1-based number, intervention) of every rule of ``spec`` on the ``attention`` stream."""
    return [(number, item) for number, item in enumerate(spec.interventions, 1) if item.site.stream == ATTENTION]


def attention_sites(model: Any) -> list[tuple[nn.Module, nn.Module, int | None]]:
    """(layer module, its attention module, layer) of every layer of an SST; of every visited layer module of a
    looped family with layer None (a module may serve several recorded layers: HRM-Text's blocks, every visit)."""
    if model.loop.visit_sites is None:
        return [(layer, attention_module(layer, f"layer {index}", USER), index)
                for index, layer in enumerate(model.layers)]
    visited = {id(module): module for module, _ in model.loop.visit_sites(model.backbone)}.values()
    return [(module, attention_module(module, type(module).__name__, USER), None) for module in visited]


def check_attention_rules(spec: InterventionSpec, model: Any, shortest_prompt: int | None = None) -> None:
    """Refuse (UsageError, one line, before anything runs) attention rules ``model`` cannot take: an attention
    implementation whose weights cannot be read, a layer without a ``self_attn``, a head its attention lacks (on a
    looped family, a head beyond every visited layer's count; each call checks its own), and, given the shortest
    prompt (tokens), a ``set`` key that lies outside some row's context at the site's first position (a row's
    query at turn-0 position p attends to keys 0..prompt + p - 1)."""
    rules = attention_rules(spec)
    if not rules:
        return
    _check_implementation(implementation(model.backbone.config))
    sites = attention_sites(model)
    for number, item in rules:
        where = f"intervention {number} ({item.operation.kind} on attention)"
        chosen = [module for _, module, layer in sites
                  if layer is None or item.site.layers is None or layer in item.site.layers]
        have = max((attention_heads(module, USER) for module in chosen), default=None)  # None: no such layer
        if item.site.heads is not None and have is not None and max(item.site.heads) >= have:
            raise UsageError(f"{where}: head {max(item.site.heads)} does not exist; the attention of the layers "
                             f"it names has {have} heads (0-{have - 1})")
        # the bound holds at turn 0; a later turn's query sees the earlier turns too
        if item.operation.kind == "set" and shortest_prompt is not None and (item.site.turns is None
                                                                              or 0 in item.site.turns):
            context = shortest_prompt + min(item.site.positions or (0,))
            outside = [key for key in item.operation.attend_to if key >= context]
            if outside:
                raise UsageError(f"{where}: key positions {outside} lie outside the context: the shortest prompt has "
                                 f"{shortest_prompt} tokens, so at position {context - shortest_prompt} a query "
                                 f"attends to keys 0-{context - 1}")


class AttentionPatcher:
    """The hooks and the kernel wrapper that carry out an Intervener's attention rules (module docstring).

    Args:
        intervener: the :class:`~sst_interp.interventions.apply.Intervener` whose rules, rows, active rows and site
            counts are used.
        modules: the attention modules that may be sites.
        locate: attention module -> the (turn, position, iteration, layer) of its call in progress, or None (a pass
            that emits no token).
        caller: the module whose calls carry the 2-D ``attention_mask`` keyword (each key's context index).
        attn_implementation: the model's attention implementation (``eager`` or ``sdpa``).
        visits: on a looped family, ``(layer module, its attention module, address)`` of every visit site; a
            pre-hook on the layer writes ``address(kwargs)``, the visit's (iteration, layer), into ``visiting``
            under the attention module's id, for ``locate`` to read.
    """

    def __init__(self, intervener: Any, modules: Sequence[nn.Module], locate: Callable[[nn.Module], Where | None],
                 caller: nn.Module, attn_implementation: str,
                 visits: Sequence[tuple[nn.Module, nn.Module, Callable[[dict[str, Any]], tuple[int, int]]]] = (),
                 visiting: dict[int, tuple[int, int]] | None = None) -> None:
        _check_implementation(attn_implementation)
        self.intervener, self.locate, self.caller = intervener, locate, caller
        self.hooks = OwnedHooks()
        self.context: torch.Tensor | None = None  # the running forward call's context index per column [B, T]
        self._watched = {id(module) for module in modules}
        self._rules = [rule for rule in intervener._rules if rule.site.stream == ATTENTION]
        self._swap = KernelSwap(modules, attn_implementation, self._wrap)
        self._eager = attn_implementation == "eager"
        self._visits, self._visiting = list(visits), visiting if visiting is not None else {}

    @classmethod
    def for_sst(cls, intervener: Any, sst: Any) -> AttentionPatcher:
        """A patcher on every layer of an SST: a call's coordinates are the pass's and the layer's index."""
        sites = attention_sites(sst)
        layer_of = {id(module): layer for _, module, layer in sites}

        def locate(module: nn.Module) -> Where | None:
            coords = intervener._coords
            return None if coords is None else (*coords, layer_of[id(module)])

        return cls(intervener, [module for _, module, _ in sites], locate, sst.backbone.get_decoder(),
                   implementation(sst.backbone.config))

    @classmethod
    def for_loop(cls, intervener: Any, model: Any) -> AttentionPatcher:
        """A patcher on every visited layer of a looped family: a pre-hook on each visit names its (iteration,
        layer) before the layer's attention runs (call :meth:`install` to register it)."""
        visiting: dict[int, tuple[int, int]] = {}  # attention module -> (iteration, layer) of the visit in progress

        def locate(module: nn.Module) -> Where | None:
            calls = intervener._pass
            return None if calls is None or id(module) not in visiting else (*calls, *visiting[id(module)])

        # the declaration's address of every call, counted by these hooks' own counter
        visits = [(module, attention_module(module, type(module).__name__, USER), address)
                  for module, address in model.loop.visit_sites(model.backbone)]
        modules = list({id(attention): attention for _, attention, _ in visits}.values())
        return cls(intervener, modules, locate, model.backbone, implementation(model.backbone.config), visits,
                   visiting)

    # ------------------------------------------------------------------------------------------ install
    def install(self) -> AttentionPatcher:
        """Hook the caller (its 2-D mask) and, on a looped family, the visits; wrap the attention function. On
        failure nothing stays installed."""
        try:
            self.hooks.forward_pre_with_kwargs(self.caller, self._mask_hook)
            for module, attention, address in self._visits:
                self.hooks.forward_pre_with_kwargs(module, self._visit_hook(attention, address), prepend=True)
            self._swap.open()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Restore the attention function and remove every hook (idempotent)."""
        self._swap.close()
        self.hooks.close()
        self.context = None

    def _mask_hook(self, module: nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
        self.context = context_index(kwargs.get("attention_mask"))

    def _visit_hook(self, attention: nn.Module, address: Callable[[dict[str, Any]], tuple[int, int]]):
        def hook(module: nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
            self._visiting[id(attention)] = tuple(int(x) for x in address(kwargs))

        return hook

    # ------------------------------------------------------------------------------------------ kernel
    def _wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def kernel(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, Any]:
            where = self.locate(module) if id(module) in self._watched else None
            rules = [rule for rule in self._rules if rule.site.matches(*where)] if where is not None else []
            if not rules:
                return original(module, query, key, value, attention_mask, **kwargs)
            if module.training and kwargs.get("dropout"):
                raise UsageError(f"attention rules replace the weights of a model without attention dropout; "
                                 f"{type(module).__name__} is training with dropout (call model.eval())")
            output, weights = original(module, query, key, value, attention_mask, **kwargs)
            if self._eager:
                last = weights[:, :, -1, :]  # [B, H, K]
            else:  # sdpa (whatever weights a recorder's wrapper added): the weights of its own query and key,
                # the softmax at least as wide as the query
                wide = torch.promote_types(query.dtype, torch.float32)
                last = weights_from_qk(module, query, key, attention_mask, softmax_dtype=wide, **kwargs)[:, :, -1, :]
            keys = key_index(self.context, last.shape[-1], attention_mask, USER).to(last.device)  # [B, K]
            pattern, changed = self._pattern(rules, where, last, keys)
            values = _repeat_kv(value, query.shape[1])
            if self._eager:
                # the kernel's weights, laid out as it laid them out, with the last query column replaced: the
                # same matmul then gives the kernel's own output wherever nothing changed
                new = weights.new_empty_strided(weights.size(), weights.stride())
                new.copy_(weights)
                new[:, :, -1, :] = pattern
                return torch.matmul(new, values).transpose(1, 2).contiguous(), new
            column = torch.matmul(pattern[:, :, None, :], values)[:, :, 0, :]  # [B, H, hd]
            out = output.clone()
            out[:, -1] = torch.where(changed[:, :, None].to(out.device), column.to(out.dtype), output[:, -1])
            return out, pattern[:, :, None, :]

        return kernel

    def _pattern(self, rules: list[Any], where: Where, last: torch.Tensor,
                 keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The rules in order on ``last`` [B, H, K] (each rule sees the earlier ones' result; a live source reads
        ``last``, what its own pass computed): (the new weights [B, H, K], which (row, head) changed [B, H] bool)."""
        iv = self.intervener
        batch, heads, _ = last.shape
        active = iv._active.cpu().bool()
        pattern, changed = last, torch.zeros(batch, heads, dtype=torch.bool)
        for rule in rules:
            listed = rule.site.heads
            if listed is not None and max(listed) >= heads:
                raise UsageError(f"{iv._where(rule)}: head {max(listed)} does not exist in layer {where[3]}'s "
                                 f"attention, which has {heads} heads (0-{heads - 1})")
            rows = iv._rows(rule)
            rows = torch.ones(batch, dtype=torch.bool) if rows is None else rows
            chosen = torch.ones(heads, dtype=torch.bool) if listed is None else \
                torch.isin(torch.arange(heads), torch.tensor(listed))
            mask = rows[:, None] & chosen[None, :]
            target = self._target(rule, where, last, keys, rows & active)
            pattern = torch.where(mask[:, :, None].to(last.device),
                                  toward(pattern, target, rule.operation.scale).to(last.dtype), pattern)
            changed |= mask
            iv._count(rule, int((rows & active).sum()))
        return pattern, changed

    def _target(self, rule: Any, where: Where, last: torch.Tensor, keys: torch.Tensor,
                rows: torch.Tensor) -> torch.Tensor:
        """The pattern ``rule`` puts at the site: [B, H, K] (a live patch) or [B, 1, K], in ``last``'s dtype;
        ``rows`` [B] bool (CPU): the active rows it changes, whose keys it checks."""
        operation, at = rule.operation, _at(where)
        visible = keys >= 0  # [B, K]
        if operation.kind == "uniform":
            share = visible.to(last.dtype)
            return (share / share.sum(-1, keepdim=True).clamp(min=1))[:, None, :]
        if operation.kind == "set":
            weights = operation.weights or (1.0 / len(operation.attend_to),) * len(operation.attend_to)
            target = torch.zeros(keys.shape, dtype=last.dtype, device=last.device)
            for position, weight in zip(operation.attend_to, weights):
                match = (keys == position) & visible
                missing = rows & ~match.any(-1).cpu()
                if missing.any():
                    row = int(missing.nonzero()[0])
                    seen = keys[row][visible[row]]
                    raise UsageError(f"{self.intervener._where(rule)}: key position {position} is outside what row "
                                     f"{row}'s query attends to {at} (keys {int(seen.min())}-{int(seen.max())}); "
                                     f"pick a key of its context")
                target = target + weight * match.to(last.dtype)
            return target[:, None, :]
        source = self.intervener._source_rows(operation, last.shape[0]).to(last.device)  # [B]
        differ = rows & (keys[source] != keys).any(-1).cpu()
        if differ.any():
            row = int(differ.nonzero()[0])
            raise UsageError(f"{self.intervener._where(rule)}: a live attention patch copies the source's weights key "
                             f"by key, but row {row} and its source row {int(source[row])} attend to other key "
                             f"positions {at}; patch between rows whose contexts have one length (finished rows "
                             f"attend to fewer keys)")
        return last[source]


def _check_implementation(name: str) -> None:
    if name not in READABLE:
        raise UsageError(f"attention rules replace the weights of eager or sdpa attention; this model runs {name!r} "
                         "(load it with attn_implementation='eager')")


def _at(where: Where) -> str:
    turn, position, iteration, layer = where
    return f"at (turn {turn}, position {position}, iteration {iteration}, layer {layer})"


def _repeat_kv(value: torch.Tensor, heads: int) -> torch.Tensor:
    """``value`` [B, H_kv, K, hd] with each key-value head repeated for the query heads it serves: [B, heads, K, hd]
    (what transformers' ``repeat_kv`` hands the kernel's matmul; ``value`` itself when there is nothing to
    repeat)."""
    batch, kv_heads, length, width = value.shape
    groups = heads // kv_heads
    if groups == 1:
        return value
    return value[:, :, None].expand(batch, kv_heads, groups, length, width).reshape(batch, heads, length, width)
