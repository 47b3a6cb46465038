"""Hooks owned by a context manager: every hook registered inside is removed on exit, also on an exception."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any

from torch import nn
from torch.utils.hooks import RemovableHandle


class OwnedHooks:
    """Registers forward hooks and removes all of them on ``close()`` / context exit (never left to ``gc``).

    Example::

        with OwnedHooks() as hooks:
            hooks.forward(model.layers[3], my_hook)
            model(x)
        # here model.layers[3]._forward_hooks is empty again, whatever happened inside
    """

    def __init__(self) -> None:
        self._handles: list[RemovableHandle] = []

    def forward(self, module: nn.Module, hook: Callable[[nn.Module, Any, Any], Any]) -> RemovableHandle:
        """``module.register_forward_hook(hook)``, owned by this object."""
        handle = module.register_forward_hook(hook)
        self._handles.append(handle)
        return handle

    def forward_with_kwargs(self, module: nn.Module, hook: Callable[[nn.Module, Any, dict[str, Any], Any], Any],
                            prepend: bool = False) -> RemovableHandle:
        """``module.register_forward_hook(hook, with_kwargs=True)`` (the hook also sees the call's keywords),
        owned by this object. ``prepend``: run before the module's other forward hooks (an intervention changes an
        output before a recorder reads it, whichever was installed first)."""
        handle = module.register_forward_hook(hook, with_kwargs=True, prepend=prepend)
        self._handles.append(handle)
        return handle

    def forward_pre(self, module: nn.Module, hook: Callable[[nn.Module, Any], Any]) -> RemovableHandle:
        """``module.register_forward_pre_hook(hook)``, owned by this object."""
        handle = module.register_forward_pre_hook(hook)
        self._handles.append(handle)
        return handle

    def forward_pre_with_kwargs(self, module: nn.Module, hook: Callable[[nn.Module, Any, dict[str, Any]], Any],
                                prepend: bool = False) -> RemovableHandle:
        """``module.register_forward_pre_hook(hook, with_kwargs=True)`` (the hook may return new ``(args,
        kwargs)``), owned by this object; ``prepend``: run before the module's other pre-hooks."""
        handle = module.register_forward_pre_hook(hook, with_kwargs=True, prepend=prepend)
        self._handles.append(handle)
        return handle

    def __len__(self) -> int:
        return len(self._handles)

    def close(self) -> None:
        """Remove every owned hook (idempotent)."""
        while self._handles:
            self._handles.pop().remove()

    def __enter__(self) -> OwnedHooks:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
