"""No function-local import in the library loads what its module has already loaded (issue 33, item 4): such an
import defers nothing and hides a dependency. The count and the classes are :mod:`tests.local_imports`'s."""

from __future__ import annotations

from tests.local_imports import _third_party, _type_checking_lines, local_imports


def test_no_function_local_import_loads_nothing_new():
    found, _ = local_imports()
    loaded = [f"{item.path.name}:{item.line} {item.target}" for item in found if item.kind == "loaded"]
    assert not loaded, "function-local imports of modules their module already loads; move them to the top:\n" + \
        "\n".join(loaded)
    # the classifier sees the imports that do defer something (torch behind --help, the probe behind a CLI, ...)
    assert sum(item.kind == "deferred" for item in found) > 10 and sum(item.kind == "lazy" for item in found) > 10


def test_the_classifier_reads_module_level_local_and_type_only_imports(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("from typing import TYPE_CHECKING\nimport numpy.linalg\nif TYPE_CHECKING:\n    import pandas\n\n"
                      "def f():\n    import numpy\n    from scipy import stats\n    return stats, numpy\n")
    top, local = _third_party(source)
    assert top == {"numpy", "numpy.linalg"}  # pandas is only a type: it never loads
    assert local == [(7, "numpy"), (8, "scipy")]
    import ast

    assert _type_checking_lines(ast.parse(source.read_text())) == {4}
