"""Lazy package exports: a package names its public objects without importing the modules that define them.

``python -m sst_interp.record --help`` and ``from sst_interp import analyses`` must not load torch, transformers or
scikit-learn before something needs them. A package ``__init__`` therefore lists where each public name lives and
imports that module on first access (PEP 562 module ``__getattr__``)::

    if TYPE_CHECKING:
        from sst_interp.model.sst import SSTModel, ...

    _EXPORTS = typed_exports(__name__)
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
    __all__ = sorted(_EXPORTS)

The ``if TYPE_CHECKING:`` imports are the one declaration of the package's public names: type checkers, editors and
the import-graph test read them, and :func:`typed_exports` reads the same statements from the package's source, so
the name -> module map is never written out a second time.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def typed_exports(package: str) -> dict[str, str]:
    """Name -> module of the names ``package`` imports from its own modules under its top-level
    ``if TYPE_CHECKING:`` block, read from its ``__init__`` source (call it from that ``__init__``). Imports from
    other packages in that block are annotations only, not exports."""
    source = Path(sys.modules[package].__file__)
    tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    exports: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and (statement.module or "").startswith(f"{package}."):
                    exports.update({alias.asname or alias.name: statement.module for alias in statement.names})
    if not exports:
        raise RuntimeError(f"{package}: no imports from its own modules under `if TYPE_CHECKING:` to export")
    return exports


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose public ``name`` is defined in module ``exports[name]``.

    A name is imported from its module on first access and then cached in the package's namespace, so later
    accesses cost a dict lookup. A submodule is imported on first access too (``analyses.basins`` works after
    ``from sst_interp import analyses``, as when the package imported its modules eagerly). Other names raise
    AttributeError, as for any module.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is not None:
            value = getattr(importlib.import_module(module), name)
        elif _is_submodule(package, name):
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__


def _is_submodule(package: str, name: str) -> bool:
    """True when ``package.name`` is a module that can be imported (public, undotted names only)."""
    if name.startswith("_") or not name.isidentifier():
        return False
    try:
        return importlib.util.find_spec(f"{package}.{name}") is not None
    except (ImportError, ValueError):
        return False
