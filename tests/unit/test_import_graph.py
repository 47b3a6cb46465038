"""The package's import graph: no cycles, no function-local imports that only exist to break one, no private
cross-package imports.

Every module of ``sst_interp`` is read with :mod:`ast` (never imported), including ``sst_interp.hooks`` and
``sst_interp.analyses``, which live in the top-level ``hooks/`` and ``analyses/`` folders. An import statement is
*module-level* when it runs while the module is imported: at the top of the file, or inside a top-level ``if``
(``if TYPE_CHECKING:`` included, so a type-only cycle counts too), ``try`` or class body; it is *function-level*
when it sits in a function body and runs on call.

Edges of the graph: ``import a.b.c`` and ``from a.b import c`` (``c`` a submodule) point at ``a.b.c``;
``from a.b import name`` points at ``a.b``, whose namespace it reads. Importing ``a.b.c`` also initialises the
packages ``a`` and ``a.b``, so those get edges too, except the importer's own ancestors (they are initialising
already when the importer runs, which is how every package works).

Rules:

* the graph of every import, module-level and function-local alike, has no cycle: a function-local import does
  not break a cycle, it only moves it from import time to call time;
* every import, module-level and function-local alike, runs down the floors (:data:`FLOORS`), or to the packages
  of its own floor that :data:`SAME_FLOOR` names: nothing imports upwards;
* no module imports a private module (``_name.py``) or a private name of another package.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP = "sst_interp"
#: Private imports tolerated, each with the reason: (importer, target) -> why. None today.
PENDING_PRIVATE: dict[tuple[str, str], str] = {}
#: The floors, lowest first (README "Architecture" holds the same table): each package of ``sst_interp`` (its first
#: name under ``sst_interp``; ``cli.args`` is the flag mechanism, apart from the commands in ``cli``; ``sst_interp``
#: is the root ``__init__``; ``commands`` are the entry files, every ``__main__``, and :data:`ENTRY_PACKAGES`). A
#: package may import the packages of lower floors, and of its own floor only those :data:`SAME_FLOOR` names;
#: nothing imports upwards.
FLOORS: dict[int, tuple[str, ...]] = {
    1: ("sst_interp", "kernels", "checkpoints", "cli.args"),
    2: ("store", "sandbox", "hooks", "data", "outputs", "synthetic", "organism"),
    3: ("model",),
    4: ("analyses", "codeact", "interventions"),
    5: ("probe", "train", "features"),
    6: ("record", "experiments", "reporting", "explore", "catalogue", "study"),
    7: ("cli", "commands"),
}
#: Package -> the packages of its own floor it may import (a floor's other packages are off limits).
SAME_FLOOR: dict[str, frozenset[str]] = {
    "checkpoints": frozenset({"kernels"}), "cli.args": frozenset({"kernels"}),
    "store": frozenset(), "sandbox": frozenset(), "hooks": frozenset(),
    "data": frozenset({"store", "sandbox", "organism"}), "outputs": frozenset({"store"}),
    "synthetic": frozenset({"store"}), "organism": frozenset(),
    "cli": frozenset(),
    # the intervention experiments record their conditions with record's runner; the catalogue gathers the
    # experiments' measurements with every other; the analysis objects look measurements up in the catalogue; the
    # report reads the experiments' folders and builds its artefacts from the catalogue and the analysis objects
    "experiments": frozenset({"record"}), "catalogue": frozenset({"experiments"}),
    "study": frozenset({"catalogue"}), "reporting": frozenset({"experiments", "catalogue", "study"}),
}
#: The packages that exist only to be run (``python -m sst_interp.report``): each holds an ``__init__`` with a
#: docstring and the ``__main__`` entry file, nothing else (:func:`test_entry_packages_hold_only_their_entry`).
ENTRY_PACKAGES = ("sst_interp.generate", "sst_interp.report", "sst_interp.intervene", "sst_interp.probe.position_sim",
                  "sst_interp.train.codeact_data")
#: Folder -> package name, as pyproject's ``package-dir`` maps them.
SOURCES = {ROOT / "sst_interp": "sst_interp", ROOT / "hooks": "sst_interp.hooks",
           ROOT / "analyses": "sst_interp.analyses"}


@dataclass(frozen=True)
class Import:
    """One internal import statement's target, as read from ``module`` at ``line``."""

    module: str
    target: str
    line: int
    local: bool  # inside a function body
    private: bool  # names a private module or a private name


def discover(sources: dict[Path, str] | None = None) -> dict[str, Path]:
    """Module name -> source file for every module of the package (packages under their own name); ``sources``
    (folder -> package name) defaults to :data:`SOURCES`."""
    modules: dict[str, Path] = {}
    for folder, package in (SOURCES if sources is None else sources).items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package, *parts))] = path
    return modules


def is_package(name: str, modules: dict[str, Path]) -> bool:
    return name in modules and modules[name].name == "__init__.py"


def _walk(body: list[ast.stmt], local: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Import statements under ``body`` with whether they run on call (inside a function) or on import."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, local
            continue
        inner = local or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                yield from _walk([child], inner)
            elif isinstance(child, ast.ExceptHandler):
                yield from _walk(child.body, inner)


def _is_private(dotted: str) -> bool:
    """True for ``_name`` parts (``__init__``, ``__version__`` and other dunders are public)."""
    return any(part.startswith("_") and not part.endswith("__") for part in dotted.split("."))


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """The internal imports of ``module``, each resolved to the module it loads."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if is_package(module, modules) else module.rpartition(".")[0]
    out: list[Import] = []
    for node, local in _walk(tree.body, False):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == TOP or alias.name.startswith(TOP + "."):
                    out.append(Import(module, alias.name, node.lineno, local, _is_private(alias.name)))
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*anchor, *([base] if base else [])])
        if not (base == TOP or base.startswith(TOP + ".")):
            continue
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            if sub in modules:  # ``from package import submodule``
                out.append(Import(module, sub, node.lineno, local, _is_private(sub)))
            else:  # a name from ``base``'s namespace
                out.append(Import(module, base, node.lineno, local,
                                  _is_private(f"{base}.{alias.name}")))
    return out


def edges_of(imp: Import, modules: dict[str, Path]) -> set[str]:
    """Modules that executing ``imp`` may initialise: its target and the target's packages (not the importer's)."""
    parts = imp.target.split(".")
    found = {imp.target} if imp.target in modules else set()
    for i in range(1, len(parts)):
        parent = ".".join(parts[:i])
        if parent in modules and not (imp.module == parent or imp.module.startswith(parent + ".")):
            found.add(parent)
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """The graph of every internal import, module-level and function-local alike: module -> the modules it may
    initialise (:func:`edges_of`)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for imp in imports_of(module, path, modules):
            graph[module] |= edges_of(imp, modules) - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
                continue
            if child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


def cycle_lines(graph: dict[str, set[str]]) -> list[str]:
    """Each cycle of ``graph`` as a line to print (its modules joined by ``<->``); empty when there is none."""
    return [" <-> ".join(c) for c in cycles(graph)]


@pytest.fixture(scope="module")
def package() -> tuple[dict[str, Path], dict[str, set[str]]]:
    modules = discover()
    return modules, import_graph(modules)


def test_every_folder_of_the_package_is_walked(package):
    modules, graph = package
    assert {"sst_interp.hooks", "sst_interp.analyses", "sst_interp.reporting", "sst_interp.model"} <= set(modules)
    assert sum(len(v) for v in graph.values()) > 100  # the walk really found the imports


def test_no_import_cycle_function_local_imports_included(package):
    """A cycle through a function-local import is a cycle: it fails at call time instead of import time, and it
    ties the modules together all the same."""
    _, graph = package
    bad = cycle_lines(graph)
    assert not bad, "import cycles (function-local imports included):\n" + "\n".join(bad)


def test_a_cycle_through_a_function_local_import_fails(tmp_path):
    """The fixture package: ``a`` imports ``b`` at the top, ``b`` imports ``a`` inside a function only. The
    module-level graph has no cycle; the graph of every import has it, and the check reports it."""
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "a.py").write_text("from sst_interp.b import helper\n\nVALUE = helper()\n")
    (folder / "b.py").write_text("def helper():\n    return 1\n\n\ndef late():\n"
                                 "    from sst_interp.a import VALUE\n\n    return VALUE\n")
    (folder / "c.py").write_text("import sst_interp.b\n")
    modules = discover({folder: TOP})
    assert set(modules) == {TOP, f"{TOP}.a", f"{TOP}.b", f"{TOP}.c"}
    local = [imp for m, p in modules.items() for imp in imports_of(m, p, modules) if imp.local]
    assert [(imp.module, imp.target) for imp in local] == [(f"{TOP}.b", f"{TOP}.a")]
    graph = import_graph(modules)
    assert cycles(graph) == [[f"{TOP}.a", f"{TOP}.b"]]
    assert cycle_lines(graph) == [f"{TOP}.a <-> {TOP}.b"]
    without_local = {m: {t for t in targets if not (m == f"{TOP}.b" and t == f"{TOP}.a")}
                     for m, targets in graph.items()}
    assert cycles(without_local) == []  # the old module-level-only check saw nothing


def test_no_private_import_across_packages(package):
    modules, _ = package
    bad = []
    for module, path in modules.items():
        home = module if is_package(module, modules) else module.rpartition(".")[0]
        for imp in imports_of(module, path, modules):
            target_home = imp.target if is_package(imp.target, modules) else imp.target.rpartition(".")[0]
            if imp.private and target_home != home and (module, imp.target) not in PENDING_PRIVATE:
                bad.append(f"{module}:{imp.line} imports private {imp.target}")
    assert not bad, "private imports across packages:\n" + "\n".join(sorted(set(bad)))


def package_of(module: str) -> str:
    """The floor-table package of ``module`` (see :data:`FLOORS`)."""
    if module in ENTRY_PACKAGES or module.endswith(".__main__"):
        return "commands"
    parts = module.split(".")
    if len(parts) == 1:
        return TOP
    if parts[1:3] == ["cli", "args"]:
        return "cli.args"
    return parts[1]


def allowed_imports(package: str) -> frozenset[str]:
    """The packages ``package`` may import: every package of a lower floor and the :data:`SAME_FLOOR` ones;
    ``commands`` (the entry files) only ``cli``."""
    if package == "commands":
        return frozenset({"cli"})
    floor = next(f for f, members in FLOORS.items() if package in members)
    below = {p for f, members in FLOORS.items() if f < floor for p in members} - {"commands"}
    return frozenset(below | SAME_FLOOR.get(package, frozenset()))


def test_every_package_has_a_floor(package):
    modules, _ = package
    placed = {p for members in FLOORS.values() for p in members}
    assert {package_of(m) for m in modules} <= placed, "packages without a floor in FLOORS (and the README)"
    assert sum(len(members) for members in FLOORS.values()) == len(placed)  # each package on one floor


def test_every_import_is_in_the_layer_table(package):
    """Module-level and function-level imports alike: a lazy import that reaches up is still an upward import."""
    modules, _ = package
    bad = []
    for module, path in modules.items():
        home = package_of(module)
        for imp in imports_of(module, path, modules):
            target = package_of(imp.target)
            if target != home and target not in allowed_imports(home):
                bad.append(f"{module}:{imp.line} imports {imp.target} ({home} may not import {target})")
    assert not bad, "imports outside the layer table:\n" + "\n".join(sorted(bad))


def test_only_the_entry_files_run_up_to_the_commands(package):
    """The entry files (the ``__main__`` modules) are the only modules outside ``cli``
    that import a command module, module-level or lazily, and every one of them imports nothing but ``cli``: a
    library module never reaches the flags of a command, and an entry file never reaches past them."""
    modules, _ = package
    entries = {m for m in modules if package_of(m) == "commands"}
    assert {"sst_interp.record.__main__", "sst_interp.probe.__main__", "sst_interp.report.__main__"} <= entries
    reaching = {module for module, path in modules.items() if package_of(module) != "cli"
                for imp in imports_of(module, path, modules) if package_of(imp.target) == "cli"}
    assert reaching <= entries, f"modules that import a command but are not entry files: {sorted(reaching - entries)}"
    beyond = sorted(f"{module} imports {imp.target}" for module in entries
                    for imp in imports_of(module, modules[module], modules) if package_of(imp.target) != "cli")
    assert not beyond, "entry files that import more than the command they start:\n" + "\n".join(beyond)


def test_entry_packages_hold_only_their_entry():
    """A ``python -m`` command outside a library package's own ``__main__`` is a package of two files: so every entry
    file is a ``__main__``, and no module that a library folder holds is an entry in disguise."""
    for name in ENTRY_PACKAGES:
        folder = ROOT.joinpath(*name.split("."))
        assert sorted(path.name for path in folder.glob("*.py")) == ["__init__.py", "__main__.py"], name
        init = folder / "__init__.py"
        assert not [node for node in ast.parse(init.read_text()).body
                    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))], f"{init} runs code"


def test_the_docs_floor_table_is_this_one():
    """docs/architecture.md lists the same packages on the same floors (its rows: ``| N. name | `pkg` (what it is),
    ... |``)."""
    section = (ROOT / "docs" / "architecture.md").read_text()
    floors: dict[int, set[str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0][:1].isdigit() and "." in cells[0]:
            names = re.sub(r"\([^)]*\)", "", cells[1])  # the packages, without their descriptions
            floors[int(cells[0].split(".")[0])] = set(re.findall(r"`([a-z_.]+)`", names))
    assert floors == {f: set(members) for f, members in FLOORS.items()}


def test_the_checks_can_fail():
    """The cycle finder on a hand-made graph."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycle_lines(graph) == ["a <-> b <-> c"]


def test_the_layer_table_can_fail():
    """The floor rule on names: upward and same-floor imports are refused, the entry files reach only the commands."""
    assert "model" in allowed_imports("analyses") and "probe" not in allowed_imports("analyses")
    # the analysis objects read the catalogue from above it; neither the catalogue nor analyses may import them
    assert "catalogue" in allowed_imports("study") and "study" not in allowed_imports("catalogue")
    assert "catalogue" not in allowed_imports("analyses") and "study" not in allowed_imports("analyses")
    assert "sandbox" not in allowed_imports("store") and "store" in allowed_imports("data")
    assert allowed_imports("kernels") == set() and allowed_imports("checkpoints") == {"kernels"}
    assert allowed_imports("commands") == {"cli"} and "cli" not in allowed_imports("record")
    assert package_of("sst_interp.cli.args") == "cli.args" and package_of("sst_interp.cli.record") == "cli"
    assert package_of("sst_interp.record.__main__") == "commands" and package_of("sst_interp") == TOP
