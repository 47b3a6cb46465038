"""Attention weights where the kernel returns none: the weights computed from the very query and key tensors the
kernel receives.

Every attention module of transformers' families hands its query, key, value and mask to one dispatch point, the
attention function of ``config._attn_implementation`` in ``ALL_ATTENTION_FUNCTIONS``. Eager attention returns its
softmax weights; ``sdpa`` returns None in their place. :class:`KernelWeights` puts a wrapper in front of the ``sdpa``
function for as long as it is open: the wrapper calls the original kernel (its output, and so every token and state,
is unchanged) and, for the modules it watches, adds the weights of the last query column, computed from the same
tensors by eager attention's own arithmetic (:func:`weights_from_qk`). The wrapper is owned: :meth:`KernelWeights.close`
restores the registry as it was, also after an exception. :class:`KernelSwap` is the owned swap itself, for any
wrapper of the function a module calls (under eager, its modeling module's ``eager_attention_forward``); the
attention interventions (:mod:`sst_interp.interventions.attention`) replace the weights through it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

import torch
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from sst_interp.kernels.errors import UsageError

#: Attention implementations whose weights the recorder can read: eager returns them, sdpa's are computed here.
READABLE = ("eager", "sdpa")


def additive_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """An attention mask as eager attention adds it to the scores: a boolean mask (True = attend, as sdpa takes it)
    becomes 0 / the dtype's minimum, as transformers' ``eager_mask`` makes it; a float mask is already additive."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.where(mask, torch.zeros((), device=mask.device, dtype=dtype), torch.finfo(dtype).min)


def weights_from_qk(module: nn.Module, query: torch.Tensor, key: torch.Tensor, attention_mask: torch.Tensor | None,
                    scaling: float | None = None, softcap: float | None = None,
                    position_bias: torch.Tensor | None = None, sinks: torch.Tensor | None = None,
                    softmax_dtype: torch.dtype = torch.float32, **_: Any) -> torch.Tensor:
    """The attention weights of the last query column, by eager attention's arithmetic (transformers'
    ``eager_attention_forward`` of Gemma 3, HRM-Text, Dory and Inkling-2 Loop): scores ``q k^T * scaling``, soft-capped
    when ``softcap`` is given, plus the position bias and the additive mask, softmax in float32 (with the sink logit
    when there is one, which takes mass but has no key), cast to the query's dtype.

    Args:
        module: the attention module (its ``head_dim`` gives the default scaling).
        query: [B, H, T_q, hd]; key: [B, H_kv, T_k, hd] (grouped-query heads are repeated, as ``repeat_kv`` does).
        attention_mask: [B, 1, T_q, T_k] boolean (True = attend) or additive, or None.
        position_bias, sinks: [.., T_q, T_k] and [B, H, T_q, 1] when the family has them.
        softmax_dtype: the softmax's dtype (float32 as eager's; the attention interventions pass the wider of the
            query's and float32, so that a float64 sdpa model's own weights are reproduced to float64 rounding).

    Returns:
        [B, H, 1, T_k] in the query's dtype.
    """
    if scaling is None:
        scaling = module.head_dim ** -0.5
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        batch, heads, length, width = key.shape
        key = key[:, :, None].expand(batch, heads, groups, length, width).reshape(batch, heads * groups, length, width)
    last = query[:, :, -1:, :]
    scores = torch.matmul(last, key.transpose(2, 3)) * scaling
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if position_bias is not None:
        scores = scores + position_bias[..., -1:, :]
    mask = additive_mask(attention_mask, query.dtype)
    if mask is not None:
        scores = scores + mask[..., -1:, :]
    if sinks is not None:
        combined = torch.cat([scores, sinks[..., -1:, :]], dim=-1).to(softmax_dtype)
        return torch.softmax(combined, dim=-1)[..., :-1].to(query.dtype)
    return torch.softmax(scores, dim=-1, dtype=softmax_dtype).to(query.dtype)


def implementation(config: Any) -> str:
    """The attention implementation a model's config names (``eager`` when it names none)."""
    return str(getattr(config, "_attn_implementation", None) or "eager")


class KernelSwap:
    """While open, the attention function that ``modules`` call under ``attn_implementation`` is ``wrap(original)``:
    under ``eager`` the ``eager_attention_forward`` of each module's own modeling module (transformers' attention
    modules fall back to that global when the config names eager), otherwise the registry entry of
    ``ALL_ATTENTION_FUNCTIONS``. Owned: :meth:`close` restores every entry as it was, also after an exception; the
    wrapper must pass the calls of other modules through unchanged (every model of the process reaches it).

    Args:
        modules: the attention modules whose calls the wrapper serves.
        attn_implementation: the models' implementation.
        wrap: ``original -> kernel`` with the kernel's signature ``(module, query, key, value, attention_mask,
            **kwargs) -> (output, weights)``.
    """

    def __init__(self, modules: Iterable[nn.Module], attn_implementation: str,
                 wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        self.name, self.wrap = attn_implementation, wrap
        self._namespaces = sorted({type(module).__module__ for module in modules})
        self._restore: list[Callable[[], None]] = []

    def open(self) -> KernelSwap:
        """Install the wrapper; idempotent. An eager modeling module without ``eager_attention_forward`` is a
        :class:`UsageError` (nothing stays installed)."""
        if self._restore:
            return self
        try:
            if self.name == "eager":
                for name in self._namespaces:
                    self._swap_global(sys.modules[name])
            else:
                self._swap_registry()
        except BaseException:
            self.close()
            raise
        return self

    def _swap_global(self, namespace: Any) -> None:
        original = getattr(namespace, "eager_attention_forward", None)
        if not callable(original):
            raise UsageError(f"{namespace.__name__} has no eager_attention_forward to wrap, so its eager attention "
                             "cannot be reached; load the model with attn_implementation='sdpa'")
        setattr(namespace, "eager_attention_forward", self.wrap(original))
        self._restore.append(lambda: setattr(namespace, "eager_attention_forward", original))

    def _swap_registry(self) -> None:
        local = ALL_ATTENTION_FUNCTIONS._local_mapping
        had, previous = self.name in local, local.get(self.name)
        ALL_ATTENTION_FUNCTIONS[self.name] = self.wrap(ALL_ATTENTION_FUNCTIONS[self.name])

        def restore() -> None:
            if had:
                ALL_ATTENTION_FUNCTIONS[self.name] = previous
            else:
                del ALL_ATTENTION_FUNCTIONS[self.name]

        self._restore.append(restore)

    def close(self) -> None:
        """Restore what :meth:`open` replaced, last first (idempotent)."""
        while self._restore:
            self._restore.pop()()

    def __enter__(self) -> KernelSwap:
        return self.open()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class KernelWeights:
    """While open, attention modules in ``modules`` that run ``sdpa`` return the weights of their last query column
    (:func:`weights_from_qk`) where the kernel returns None; every other call of the kernel is passed through as it
    is. Nothing is changed for an eager model (its weights come from the kernel itself).

    Args:
        modules: the attention modules whose weights are read.
        attn_implementation: the model's implementation; one outside :data:`READABLE` is a :class:`UsageError`.
    """

    def __init__(self, modules: Iterable[nn.Module], attn_implementation: str) -> None:
        if attn_implementation not in READABLE:
            raise UsageError(f"--attention reads weights from eager or sdpa attention; this model runs "
                             f"{attn_implementation!r} (load it with attn_implementation='eager')")
        modules = list(modules)
        self.watched = {id(module) for module in modules}
        self.name = attn_implementation
        self._swap = KernelSwap(modules, attn_implementation, self._wrap)

    def _wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        watched = self.watched

        def kernel(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, Any]:
            output, weights = original(module, query, key, value, attention_mask, **kwargs)
            if weights is None and id(module) in watched:
                weights = weights_from_qk(module, query, key, attention_mask, **kwargs)
            return output, weights

        return kernel

    def open(self) -> KernelWeights:
        """Install the wrapper (sdpa only); idempotent."""
        if self.name != "eager":
            self._swap.open()
        return self

    def close(self) -> None:
        """Restore the registry entry as it was (idempotent)."""
        self._swap.close()

    def __enter__(self) -> KernelWeights:
        return self.open()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
