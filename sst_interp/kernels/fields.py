"""Config fields declared once: each field's default, its documentation and its command-line form together.

A library config (``RecordOptions``, ``TrainConfig``, ...) declares every field with :func:`arg`; the command layer
(:mod:`sst_interp.cli.args`) builds the command's parser from those declarations, so a flag's spelling, default and
help text exist only on the config. This module is the declaring half only: it lives on the kernels floor so that a
config in any package can use it without importing :mod:`sst_interp.cli` (which sits above every library package),
and it imports nothing but the standard library. How each field type becomes an argparse flag belongs to
:mod:`sst_interp.cli.args`.

Most fields are typed on the command line as they are held (``--top-k 128`` is ``top_k = 128``). A field whose value
is not what a user types -- a parsed ``KEY=VALUE`` list, a config object gathered from several flags -- names a
:class:`Flags`: a small dataclass of the flags it is typed as (declared with :func:`arg` too) and the function that
turns those flags into the field's value. The command line then shows that form's flags in the field's place and
never the field itself; the library takes the value directly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Flags:
    """How a field is typed on the command line when its value is not typed directly.

    Attributes:
        form: a dataclass whose fields (declared with :func:`arg`) are the flags the field is typed as; they stand
            in the field's place on the command line.
        convert: the parsed ``form`` instance -> the field's value; bad input raises
            :class:`~sst_interp.kernels.errors.UsageError` naming the flag.
    """

    form: type
    convert: Callable[[Any], Any]


def arg(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    choices: Sequence[Any] | None = None,
    repeat: bool = False,
    metavar: str | None = None,
    flags: Flags | None = None,
    positional: bool = False,
    flag: str | None = None,
) -> Any:
    """A dataclass field that is also a documented CLI flag (see :mod:`sst_interp.cli.args` for the mapping).

    Args:
        default: the field's default; leave it out for a required flag.
        help: the flag's help text (also the field's documentation).
        default_factory: a zero-argument factory for a mutable default (lists, dicts).
        choices: the only values the flag accepts.
        repeat: a ``list`` field is given by repeating the flag (one value each) instead of comma-separated.
        metavar: the value's placeholder in ``--help``.
        flags: the flags the field is typed as instead of its own (see :class:`Flags`); ``help`` then documents
            the field for the library only.
        positional: the field is a positional argument (``explore RUN``) instead of a ``--flag``.
        flag: the flag's name when it is not the field's (``runs`` typed as a repeated ``--run``), without ``--``.
    """
    metadata: dict[str, Any] = {"help": help}
    if choices is not None:
        metadata["choices"] = tuple(choices)
    if repeat:
        metadata["repeat"] = True
    if metavar is not None:
        metadata["metavar"] = metavar
    if flags is not None:
        metadata["flags"] = flags
    if positional:
        metadata["positional"] = True
    if flag is not None:
        metadata["flag"] = flag
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def setting(default: Any = dataclasses.MISSING, *, help: str,
            default_factory: Callable[[], Any] | Any = dataclasses.MISSING) -> Any:
    """A config field that is not on the command line (set by the library's callers only), documented like the
    fields declared with :func:`arg`."""
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={"help": help, "command_line": False})
