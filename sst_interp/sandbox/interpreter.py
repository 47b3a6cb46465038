"""Which Python runs inside the sandbox: the base interpreter of the running one, never a venv's.

The code inside needs only the standard library. A virtualenv's ``python`` is a link back to the base
interpreter and its ``site-packages`` may live in a directory the sandbox hides (the caller's working
directory or home), so the sandbox runs ``sys._base_executable`` and keeps ``sys.base_prefix`` (and
``sys.base_exec_prefix``) visible, re-binding them read-only when they lie under a hidden path (pyenv under
``/root/.pyenv``).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Interpreter:
    """A Python executable and the directory trees it needs to start.

    Args:
        executable: absolute path, symlinks resolved.
        roots: directories that must stay visible (its prefixes, and the executable's own directory when
            that lies outside them).
    """

    executable: str
    roots: tuple[str, ...]


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def base_interpreter() -> Interpreter:
    """The base interpreter of the running Python (see the module docstring)."""
    executable = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    roots: list[str] = []
    for prefix in (sys.base_prefix, sys.base_exec_prefix):
        real = os.path.realpath(prefix)
        if real not in roots:
            roots.append(real)
    if not any(_inside(executable, root) for root in roots):
        roots.append(os.path.dirname(executable))
    return Interpreter(executable, tuple(roots))


def sandbox_env(interpreter: Interpreter, workdir: str) -> dict[str, str]:
    """The whole environment of the sandboxed processes (both backends): nothing of the caller's.

    ``PATH`` starts with the interpreter's directory, so ``python3`` in a subprocess is the same Python.
    """
    return {
        "PATH": f"{os.path.dirname(interpreter.executable)}:/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
