"""The library's function-local imports, counted and classified with :mod:`ast` (nothing is imported; issue 33).

An import is *function-local* when it sits in a function body and so runs on call. Each one is put in one class:

- ``loaded``: the importing module already loads the target when it is imported itself, through its module-level
  imports (transitively: the target is in the module-level closure of the importer, or for a third-party module,
  some module of that closure imports its distribution at module level). Such an import defers nothing and only
  hides a dependency from the reader and the import graph; it belongs at the top of the file. Hoisting it cannot
  close a cycle, since the module-level graph is acyclic and the target is already below the importer.
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

from tests.unit.test_import_graph import ROOT, discover, edges_of, imports_of, module_graph

CLASSES: tuple[str, ...] = ("loaded", "deferred", "lazy")


@dataclass(frozen=True)
class LocalImport:
    """One function-local import: the importing module, the line, what it loads and its class."""

    module: str
    path: Path
    line: int
    target: str
    kind: str


def _statements(body: list[ast.stmt], local: bool):
    """(import statement, runs on call) for every import under ``body`` (the import-graph test's walk)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, local
            continue
        inner = local or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                yield from _statements([child], inner)
            elif isinstance(child, ast.ExceptHandler):
                yield from _statements(child.body, inner)


def _third_party(path: Path) -> tuple[set[str], list[tuple[int, str]]]:
    """A module's third-party distributions imported at module level, and its function-local ones (line, name)."""
    top: set[str] = set()
    local: list[tuple[int, str]] = []
    for node, on_call in _statements(ast.parse(path.read_text(encoding="utf-8")).body, False):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "sst_interp"):
            continue
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""])
        for name in names:
            root = name.split(".")[0]
            if root in ("sst_interp", "__future__") or root in sys.stdlib_module_names:
                continue
            (local.append((node.lineno, root)) if on_call else top.add(root))
    return top, local


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
    graph, _ = module_graph(modules)
    third = {module: _third_party(path) for module, path in modules.items()}
    # one entry per statement (``from x import a, b`` names x once): loaded only if every name it loads is
    found: dict[tuple[str, int], LocalImport] = {}
    for module, path in modules.items():
        closure = _closure(graph, module)
        distributions = set().union(*(third[m][0] for m in closure))
        for imp in imports_of(module, path, modules):
            if imp.local:
                loaded = edges_of(imp, modules) <= closure | {module}
                _keep(found, LocalImport(module, path, imp.line, imp.target, "loaded" if loaded else "lazy"))
        for line, root in third[module][1]:
            _keep(found, LocalImport(module, path, line, root, "loaded" if root in distributions else "deferred"))
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
