"""MkDocs hook: a source tree that static analysis can read, for the API reference.

The package maps ``analyses/`` and ``hooks/`` into ``sst_interp`` (``[tool.setuptools.package-dir]``), which
mkdocstrings' static loader cannot follow. On load, this hook lays out ``build/api-src/sst_interp`` as symlinks to
the real folders, in the shape the installed package has; ``mkdocs.yml`` points the handler there. Nothing is
imported, so documenting a command module never runs it.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / "build" / "api-src"


def _lay_out() -> None:
    package_dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    if TREE.exists():
        shutil.rmtree(TREE)
    package = TREE / "sst_interp"
    package.mkdir(parents=True)
    for entry in (ROOT / "sst_interp").iterdir():
        (package / entry.name).symlink_to(entry)
    for dotted, folder in package_dirs.items():
        (package / dotted.split(".", 1)[1]).symlink_to(ROOT / folder)


_lay_out()
