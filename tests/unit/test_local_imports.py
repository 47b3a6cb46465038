"""Function-local imports stay only where they keep a third-party module off a light path (issue 33, item 4; issue
45, item 2). The count and the classes are :mod:`tests.local_imports`'s; the kept ones, each with its reason, are
listed in ``tests/local_imports.txt``."""

from __future__ import annotations

import ast

import pytest

from tests.local_imports import (
    BUDGET,
    LISTING,
    PENDING_STDLIB,
    ROOT,
    _external,
    _third_party,
    _type_checking_lines,
    listing,
    local_imports,
)
from tests.unit.test_import_graph import TOP, _walk, discover


@pytest.fixture(scope="module")
def library():
    """The library's function-local imports, classified once for the module (parsing every file is slow)."""
    return local_imports()[0]


def test_no_function_local_import_loads_nothing_new(library):
    found = library
    loaded = [f"{item.path.name}:{item.line} {item.target}" for item in found if item.kind == "loaded"]
    assert not loaded, "function-local imports of modules their module already loads; move them to the top:\n" + \
        "\n".join(loaded)
    # the classifier sees the imports that do defer something (torch behind --help, the probe behind a CLI, ...)
    assert sum(item.kind == "deferred" for item in found) > 10 and sum(item.kind == "lazy" for item in found) > 10


def test_no_function_local_import_of_a_module_that_brings_no_third_party_module(library):
    """A project module whose imports load no third-party module the importer lacks costs nothing at import time:
    deferring it only hides the dependency."""
    found = library
    needless = [f"{item.path.name}:{item.line} {item.target}" for item in found if item.kind == "needless"]
    assert not needless, "function-local imports that defer no third-party module; move them to the top:\n" + \
        "\n".join(needless)


def test_no_function_local_import_of_the_standard_library(library):
    """The interpreter's own modules load in a millisecond or two: deferring one keeps nothing heavy off a path and
    only hides the dependency (issue 58 item 5). PENDING_STDLIB lists the ones not moved yet, each still there."""
    found = {(item.path.relative_to(ROOT).as_posix(), item.target.split(".")[0]): item for item in library
             if item.kind == "stdlib"}
    moved = sorted(set(PENDING_STDLIB) - set(found))
    assert not moved, f"moved to the top: remove {moved} from PENDING_STDLIB in tests/local_imports.py"
    local = [f"{item.path.name}:{item.line} {item.target}" for key, item in found.items() if key not in PENDING_STDLIB]
    assert not local, "function-local imports of the standard library; move them to the top:\n" + "\n".join(local)


def test_the_count_is_every_function_local_import_statement(library):
    """Every function-local import statement is counted in one class, the standard library's included: the count is
    what a plain walk of the syntax trees finds."""
    statements = {(path, node.lineno) for path in discover().values()
                  for node, on_call in _walk(ast.parse(path.read_text(encoding="utf-8")).body, False) if on_call}
    assert {(item.path, item.line) for item in library} == statements


def test_the_library_holds_at_most_its_budget_of_function_local_imports(library):
    found = library
    assert len(found) <= BUDGET, f"{len(found)} function-local imports, more than {BUDGET}"


def test_every_kept_import_is_listed_with_its_reason(library):
    """tests/local_imports.txt is the code's list (``python -m tests.local_imports --write`` rewrites it): a new
    function-local import shows up in review with what it keeps off the path."""
    found = library
    assert LISTING.read_text(encoding="utf-8") == listing(found), (
        f"{LISTING.name} differs from the code; run python -m tests.local_imports --write and review the diff")
    assert all(" keeps " in row and not row.endswith("keeps  off") for row in listing(found).splitlines())


def test_the_classifier_reads_module_level_local_and_type_only_imports(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("from typing import TYPE_CHECKING\nimport numpy.linalg\nif TYPE_CHECKING:\n    import pandas\n\n"
                      "def f():\n    import numpy\n    from scipy import stats\n    import json\n"
                      "    return stats, numpy\n")
    top, local = _third_party(source)
    assert top == {"numpy", "numpy.linalg"}  # pandas is only a type: it never loads
    assert local == [(7, "numpy"), (8, "scipy")]
    assert _external(source) == (top, local, [(9, "json")])  # the standard library's, apart
    assert _type_checking_lines(ast.parse(source.read_text())) == {4}


def test_the_classes_on_a_fixture_package(tmp_path):
    """``a`` loads numpy at the top; its functions import ``b`` (no third-party module: needless), ``c`` (pandas:
    lazy), ``d`` through the package's lazy export (d loads scipy: lazy, though the package itself loads nothing),
    numpy again (loaded), ``yaml`` (deferred) and ``json`` (stdlib)."""
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "__init__.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                        "    from sst_interp.d import solve\n")
    (folder / "a.py").write_text("import numpy\n\n\ndef f():\n    from sst_interp import b\n"
                                 "    from sst_interp.c import frame\n    from sst_interp import solve\n"
                                 "    import numpy\n    import yaml\n    import json\n"
                                 "    return b, frame, solve, numpy, yaml, json\n")
    (folder / "b.py").write_text("VALUE = 1\n")
    (folder / "c.py").write_text("import pandas\n\nframe = pandas.DataFrame\n")
    (folder / "d.py").write_text("import scipy\n\nsolve = scipy\n")
    found, _ = local_imports({folder: TOP})
    kinds = {(item.line, item.target): (item.kind, item.function, item.keeps_off) for item in found}
    assert kinds == {(5, f"{TOP}.b"): ("needless", "f", ()), (6, f"{TOP}.c"): ("lazy", "f", ("pandas",)),
                     (7, TOP): ("lazy", "f", ("scipy",)), (8, "numpy"): ("loaded", "f", ()),
                     (9, "yaml"): ("deferred", "f", ("yaml",)), (10, "json"): ("stdlib", "f", ())}
    assert listing(found).splitlines() == [f"{folder / 'a.py'} f {TOP}.c: keeps pandas off",
                                           f"{folder / 'a.py'} f {TOP}: keeps scipy off",
                                           f"{folder / 'a.py'} f yaml: keeps yaml off"]
