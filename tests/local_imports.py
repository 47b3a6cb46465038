"""The library's function-local imports, counted and classified with :mod:`ast` (nothing is imported; issue 33).

An import is *function-local* when it sits in a function body and so runs on call. Each one is put in one class:

- ``loaded``: the importing module already loads the target when it is imported itself, through the module-level
  imports that run (transitively, ``if TYPE_CHECKING:`` blocks left out: the target is in the importer's closure,
  or for a third-party module, some module of that closure imports that very module, or a submodule of it). Such an
  import defers nothing and only hides a dependency from the reader and the import graph; it belongs at the top of
  the file. Hoisting it cannot close a cycle: the module-level graph is acyclic and the target is already below
  the importer.
- ``deferred``: a third-party module the importer does not otherwise load (torch, transformers, scikit-learn,
  matplotlib, ...): kept so that a light path (``--help``, reading a run) does not pay for it.
- ``lazy``: a project module the importer does not otherwise load: kept where the path is genuinely optional.

Usage: ``python -m tests.local_imports [--list loaded|deferred|lazy]`` prints the counts, the rate per 1,000
library lines, and optionally each import of one class as ``path:line target``.
``tests/unit/test_local_imports.py`` holds the library to no ``loaded`` import.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tests.unit.test_import_graph import ROOT, _walk, discover, edges_of, imports_of

CLASSES: tuple[str, ...] = ("loaded", "deferred", "lazy")


@dataclass(frozen=True)
class LocalImport:
    """One function-local import: the importing module, the line, what it loads and its class."""

    module: str
    path: Path
    line: int
    target: str
    kind: str


def _type_checking_lines(tree: ast.Module) -> set[int]:
    """The lines of ``if TYPE_CHECKING:`` blocks: their imports never run, so they load nothing."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                lines.update(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
    return lines


def _third_party(path: Path) -> tuple[set[str], list[tuple[int, str]]]:
    """A module's third-party modules imported at module level (dotted, with the packages they initialise), and its
    function-local ones as (line, dotted module)."""
    top: set[str] = set()
    local: list[tuple[int, str]] = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = _type_checking_lines(tree)
    for node, on_call in _walk(tree.body, False):
        if node.lineno in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "sst_interp"):
            continue
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""])
        for name in names:
            root = name.split(".")[0]
            if root in ("sst_interp", "__future__") or root in sys.stdlib_module_names:
                continue
            if on_call:
                local.append((node.lineno, name))
            else:  # ``import a.b.c`` initialises a, a.b and a.b.c
                parts = name.split(".")
                top.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return top, local


def _bound_names(path: Path) -> set[str]:
    """Names a module binds when it runs (``if TYPE_CHECKING:`` blocks left out)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = _type_checking_lines(tree)
    names: set[str] = set()
    for node in tree.body:
        if node.lineno in typing_only:
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _lazy_export(imp, path: Path, modules: dict[str, Path]) -> bool:
    """True for ``from package import name`` where the package's ``__init__`` does not bind ``name`` when it runs:
    the name is a lazy export (``sst_interp.kernels.lazy``), and importing it loads the module behind it."""
    target = modules.get(imp.target)
    if target is None or target.name != "__init__.py":
        return False
    node = next((n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(n, ast.ImportFrom) and n.lineno == imp.line), None)
    if node is None:  # ``import package.module`` names its module outright
        return False
    bound = _bound_names(target)
    return any(a.name not in bound and f"{imp.target}.{a.name}" not in modules for a in node.names)


def _running_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """The module-level import graph of the import-graph test, less the imports that never run (``if
    TYPE_CHECKING:`` blocks, which that test keeps so that a type-only cycle counts too)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        typing_only = _type_checking_lines(ast.parse(path.read_text(encoding="utf-8")))
        for imp in imports_of(module, path, modules):
            if not imp.local and imp.line not in typing_only:
                graph[module] |= edges_of(imp, modules) - {module}
    return graph


def _closure(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def local_imports() -> tuple[list[LocalImport], int]:
    """Every function-local import statement of the library, classified, and the library's line count."""
    modules = discover()
    graph = _running_graph(modules)
    third = {module: _third_party(path) for module, path in modules.items()}
    # one entry per statement (``from x import a, b`` names x once): loaded only if every name it loads is
    found: dict[tuple[str, int], LocalImport] = {}
    for module, path in modules.items():
        closure = _closure(graph, module)
        distributions = set().union(*(third[m][0] for m in closure))
        for imp in imports_of(module, path, modules):
            if imp.local:
                loaded = edges_of(imp, modules) <= closure | {module} and not _lazy_export(imp, path, modules)
                _keep(found, LocalImport(module, path, imp.line, imp.target, "loaded" if loaded else "lazy"))
        for line, name in third[module][1]:
            _keep(found, LocalImport(module, path, line, name, "loaded" if name in distributions else "deferred"))
    lines = sum(len(path.read_text(encoding="utf-8").splitlines()) for path in modules.values())
    return list(found.values()), lines


def _keep(found: dict[tuple[str, int], LocalImport], item: LocalImport) -> None:
    """Record one statement; a statement with one name not yet loaded is not ``loaded``."""
    key = (item.module, item.line)
    if key not in found or found[key].kind == "loaded":
        found[key] = item


def main() -> None:
    parser = argparse.ArgumentParser(description="count the library's function-local imports")
    parser.add_argument("--list", choices=CLASSES, help="print each import of this class")
    args = parser.parse_args()
    found, lines = local_imports()
    counts = Counter(item.kind for item in found)
    print(f"{len(found)} function-local imports in {lines:,} library lines ({1000 * len(found) / lines:.1f} per "
          f"1,000): " + ", ".join(f"{kind} {counts[kind]}" for kind in CLASSES))
    for item in found:
        if item.kind == args.list:
            print(f"{item.path.relative_to(ROOT)}:{item.line} {item.target}")


if __name__ == "__main__":
    main()
