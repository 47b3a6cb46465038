"""The library's function-local imports, counted and classified with :mod:`ast` (nothing is imported; issues 33, 45).

An import is *function-local* when it sits in a function body and so runs on call. One stays only where it keeps a
third-party module (torch, transformers, scikit-learn, scipy, pandas, ...) off a path that does not otherwise load
it: ``--help``, ``from sst_interp import analyses``, the explorer server. Each one is put in one class:

- ``loaded``: the importing module already loads the target when it is imported itself, through the module-level
  imports that run (transitively, ``if TYPE_CHECKING:`` blocks left out; a package's lazy export counts as the
  module behind it): the target is in the importer's closure, or for a third-party module, some module of that
  closure imports that very module, or a submodule of it. Such an import defers nothing and only hides a dependency
  from the reader and the import graph; it belongs at the top of the file.
- ``needless``: a project module the importer does not otherwise load, but whose own imports load no third-party
  module the importer lacks: deferring it saves nothing worth a hidden dependency, so it belongs at the top too.
- ``deferred``: a third-party module the importer does not otherwise load: kept so that a light path does not pay
  for it.
- ``lazy``: a project module that loads third-party modules the importer does not (its reason names them).
- ``stdlib``: a module of the standard library (``sys.stdlib_module_names``). It keeps nothing heavy off a path
  (the interpreter's own modules load in a millisecond or two), so it belongs at the top too; the few still
  local are :data:`PENDING_STDLIB`, each with the reason it is not moved yet.

Every function-local import statement is one of these, so the count is the count of the statements (issue 58).

Usage: ``python -m tests.local_imports [--list CLASS]`` prints the counts, the rate per 1,000 library lines, and
optionally each import of one class as ``path:line target``; ``--write`` rewrites :data:`LISTING`, the kept imports
with their reasons, which ``tests/unit/test_local_imports.py`` holds equal to the code, with no ``loaded`` or
``needless`` or ``stdlib`` import (but :data:`PENDING_STDLIB`) and at most :data:`BUDGET` in all.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tests.unit.test_import_graph import ROOT, _walk, discover, edges_of, imports_of

CLASSES: tuple[str, ...] = ("loaded", "needless", "deferred", "lazy", "stdlib")
#: The most function-local imports the library may hold (issue 45, item 2).
BUDGET = 120
#: Function-local imports of the standard library not yet moved to the top, (path, module) -> why.
PENDING_STDLIB: dict[tuple[str, str], str] = {
}
#: Every kept function-local import with what it keeps off its importer's path, one per line (``--write``).
LISTING = Path(__file__).with_name("local_imports.txt")


@dataclass(frozen=True)
class LocalImport:
    """One function-local import: the importing module, the line, what it loads and its class."""

    module: str
    path: Path
    line: int
    target: str
    kind: str
    function: str = ""  # the enclosing function (``Class.method``)
    keeps_off: tuple[str, ...] = ()  # the third-party modules it keeps off the importer's path


def _type_checking_lines(tree: ast.Module) -> set[int]:
    """The lines of ``if TYPE_CHECKING:`` blocks: their imports never run, so they load nothing."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                lines.update(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
    return lines


def _external(path: Path) -> tuple[set[str], list[tuple[int, str]], list[tuple[int, str]]]:
    """A module's imports from outside the project: the third-party modules imported at module level (dotted, with
    the packages they initialise), and the function-local imports of third-party modules and of the standard
    library, each as (line, dotted module)."""
    top: set[str] = set()
    local: list[tuple[int, str]] = []
    standard: list[tuple[int, str]] = []
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
            if root in ("sst_interp", "__future__"):
                continue
            if root in sys.stdlib_module_names:
                if on_call:
                    standard.append((node.lineno, name))
            elif on_call:
                local.append((node.lineno, name))
            else:  # ``import a.b.c`` initialises a, a.b and a.b.c
                parts = name.split(".")
                top.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return top, local, standard


def _third_party(path: Path) -> tuple[set[str], list[tuple[int, str]]]:
    """A module's third-party modules imported at module level (dotted, with the packages they initialise), and its
    function-local ones as (line, dotted module)."""
    top, local, _ = _external(path)
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


def _lazy_exports(package: Path) -> dict[str, str]:
    """A package ``__init__``'s lazy exports, name -> the module behind it (its ``if TYPE_CHECKING:`` imports, which
    ``sst_interp.kernels.lazy.typed_exports`` reads the same way)."""
    out: dict[str, str] = {}
    for node in ast.parse(package.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                if isinstance(inner, ast.ImportFrom) and inner.module:
                    out.update({alias.asname or alias.name: inner.module for alias in inner.names})
    return out


def _export_edges(node: ast.ImportFrom, modules: dict[str, Path]) -> set[str]:
    """The modules behind the lazy exports that ``from package import name`` names (empty for other imports)."""
    package = modules.get(node.module or "")
    if package is None or package.name != "__init__.py":
        return set()
    exports = _lazy_exports(package)
    return {exports[a.name] for a in node.names if exports.get(a.name) in modules}


def _running_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """The module-level import graph of the import-graph test, less the imports that never run (``if
    TYPE_CHECKING:`` blocks, which that test keeps so that a type-only cycle counts too), plus the module behind each
    lazy export a module-level import names (importing the name loads it)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = _type_checking_lines(tree)
        for imp in imports_of(module, path, modules):
            if not imp.local and imp.line not in typing_only:
                graph[module] |= edges_of(imp, modules) - {module}
        for node, on_call in _walk(tree.body, False):
            if isinstance(node, ast.ImportFrom) and not on_call and node.lineno not in typing_only:
                graph[module] |= _export_edges(node, modules) - {module}
    return graph


def _closure(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _functions(tree: ast.Module) -> dict[int, str]:
    """Line -> the dotted name of the innermost function (or method) holding it."""
    names: dict[int, str] = {}

    def visit(node: ast.AST, prefix: str, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if isinstance(child, ast.ClassDef):
                    visit(child, f"{name}.", in_function)
                    continue
                for line in range(child.lineno, (child.end_lineno or child.lineno) + 1):
                    names[line] = name
                visit(child, f"{name}.", True)
            else:
                visit(child, prefix, in_function)

    visit(tree, "", False)
    return names


def local_imports(sources: dict[Path, str] | None = None) -> tuple[list[LocalImport], int]:
    """Every function-local import statement of the library (or of ``sources``, folder -> package name, as
    :func:`~tests.unit.test_import_graph.discover` takes them), classified, and its line count."""
    modules = discover(sources)
    graph = _running_graph(modules)
    external = {module: _external(path) for module, path in modules.items()}
    third = {module: (top, local) for module, (top, local, _) in external.items()}
    closures = {module: _closure(graph, module) for module in modules}
    loads = {module: set().union(*(third[m][0] for m in closure)) for module, closure in closures.items()}
    found: dict[tuple[str, int], LocalImport] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = _functions(tree)
        statements = {node.lineno: node for node, on_call in _walk(tree.body, False) if on_call}
        closure, distributions = closures[module], loads[module]
        by_line: dict[int, set[str]] = {}
        for imp in imports_of(module, path, modules):
            if imp.local:
                node = statements[imp.line]
                targets = edges_of(imp, modules) | (_export_edges(node, modules) if isinstance(node, ast.ImportFrom)
                                                    else set())
                by_line.setdefault(imp.line, set()).update(targets - {module})
        for line, targets in by_line.items():
            target = next(imp.target for imp in imports_of(module, path, modules) if imp.line == line)
            if targets <= closure:
                kind, keeps_off = "loaded", ()
            else:
                brought = set().union(*(loads[t] for t in targets)) - distributions
                keeps_off = tuple(sorted({name.split(".")[0] for name in brought}))
                kind = "lazy" if keeps_off else "needless"
            _keep(found, LocalImport(module, path, line, target, kind, functions.get(line, ""), keeps_off))
        for line, name in third[module][1]:
            kind = "loaded" if name in distributions else "deferred"
            _keep(found, LocalImport(module, path, line, name, kind, functions.get(line, ""),
                                     () if kind == "loaded" else (name.split(".")[0],)))
        for line, name in external[module][2]:  # after the others: a statement that also defers one keeps it
            _keep(found, LocalImport(module, path, line, name, "stdlib", functions.get(line, "")))
    lines = sum(len(path.read_text(encoding="utf-8").splitlines()) for path in modules.values())
    return sorted(found.values(), key=lambda item: (str(item.path), item.line)), lines


def _keep(found: dict[tuple[str, int], LocalImport], item: LocalImport) -> None:
    """Record one statement; a statement with one name not yet loaded is not ``loaded`` (a statement of standard
    library modules only is ``stdlib``)."""
    key = (item.module, item.line)
    if key not in found or found[key].kind == "loaded":
        found[key] = item


def _shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def listing(found: list[LocalImport]) -> str:
    """The kept imports (``deferred`` and ``lazy``) as :data:`LISTING` holds them: ``path function target: keeps
    off ...``, sorted, without line numbers so that an edit elsewhere in a file does not change it."""
    rows = sorted({f"{_shown(item.path)} {item.function or '<module>'} {item.target}: keeps "
                   f"{', '.join(item.keeps_off)} off" for item in found if item.kind in ("deferred", "lazy")})
    return "".join(row + "\n" for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description="count the library's function-local imports")
    parser.add_argument("--list", choices=CLASSES, help="print each import of this class")
    parser.add_argument("--write", action="store_true", help=f"rewrite {LISTING.name} from the code")
    args = parser.parse_args()
    found, lines = local_imports()
    counts = Counter(item.kind for item in found)
    print(f"{len(found)} function-local imports in {lines:,} library lines ({1000 * len(found) / lines:.1f} per "
          f"1,000): " + ", ".join(f"{kind} {counts[kind]}" for kind in CLASSES))
    for item in found:
        if item.kind == args.list:
            print(f"{item.path.relative_to(ROOT)}:{item.line} {item.target} ({', '.join(item.keeps_off)})")
    if args.write:
        LISTING.write_text(listing(found), encoding="utf-8")
        print(f"wrote {LISTING.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
