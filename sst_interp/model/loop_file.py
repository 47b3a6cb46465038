"""A user's loop declaration from ``record --loop FILE.py:NAME``: the file run as a module of its own, the
declaration checked, and the file's hash for the run's identity."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

from sst_interp.kernels.errors import UsageError
from sst_interp.model.loop_declaration import LoopDeclaration


def _split_loop_spec(spec: str) -> tuple[Path, str]:
    path, sep, name = str(spec).rpartition(":")
    if not sep or not path or not name.isidentifier():
        raise UsageError(f"--loop {spec!r}: expected FILE.py:NAME (a Python file and the name of the loop "
                         "declaration in it)")
    return Path(path), name


def load_loop_file(spec: str) -> LoopDeclaration:
    """The loop declaration ``NAME`` of the user's Python file, from ``--loop FILE.py:NAME``. The file runs as a
    module of its own (it may import torch, transformers and sst_interp). Refused with a :class:`UsageError`: a
    malformed spec, a missing file, a file that fails to run (its error named), a missing name, and an object that
    is not a declaration a looped model can be recorded with."""
    path, name = _split_loop_spec(spec)
    if not path.is_file():
        raise UsageError(f"--loop {spec}: no such file {path}")
    module_spec = importlib.util.spec_from_file_location(f"sst_interp_user_loop_{path.stem}", path)
    if module_spec is None or module_spec.loader is None:
        raise UsageError(f"--loop {spec}: {path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except UsageError as err:  # looped_block's own refusal of a malformed declaration
        raise UsageError(f"--loop {spec}: {err}") from err
    except Exception as err:  # the user's file is theirs: any error in it is bad input, named with its line
        raise UsageError(f"--loop {spec}: {path} failed to run: {type(err).__name__}: {err}") from err
    if not hasattr(module, name):
        found = sorted(key for key, value in vars(module).items() if isinstance(value, LoopDeclaration))
        raise UsageError(f"--loop {spec}: {path} defines no {name!r} (loop declarations in it: "
                         f"{', '.join(found) or 'none'})")
    declaration = getattr(module, name)
    if not isinstance(declaration, LoopDeclaration) or declaration.visit_sites is None \
            or declaration.lens_sites is None or declaration.lens_head is None or declaration.depth_key is None:
        raise UsageError(f"--loop {spec}: {name} is not a loop declaration a looped model can be recorded with "
                         f"(got {type(declaration).__name__}); build it with sst_interp.model.loops.looped_block")
    return declaration


def loop_file_sha256(spec: str) -> str:
    """The sha256 of the ``--loop`` file's text (part of a run's identity)."""
    return hashlib.sha256(_split_loop_spec(spec)[0].read_bytes()).hexdigest()
