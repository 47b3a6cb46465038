"""Command lines built from dataclass configs: the one mechanism behind every ``python -m sst_interp.*`` CLI.

Every field of a config dataclass becomes one documented flag, the same way in all five CLIs:

- the flag is the field name with ``_`` -> ``-`` (``max_new_tokens`` -> ``--max-new-tokens``), or the name given
  as ``arg(..., flag=...)`` (``runs`` typed as ``--run``);
- the help text is the field's ``metadata["help"]`` (declare fields with :func:`~sst_interp.kernels.fields.arg`, on
  the kernels floor so that library configs declare their own flags; re-exported here); a non-None default other
  than ``False`` is appended as ``(default: X)`` unless the help already says what the default is;
- the field's type picks the parsing: ``bool`` (also ``bool | None``) is ``--flag`` / ``--no-flag``; ``int``,
  ``float``, ``str`` and ``Path`` (optionally ``| None``) take one value; ``list[X]`` (and ``tuple[X, ...]``, parsed
  as a list and handed over as a tuple) takes a comma-separated list, or with ``arg(..., repeat=True)`` one value
  per repetition of the flag; ``dict[str, int]`` takes
  ``KEY=ID,KEY=ID``;
- a field without a default is a required flag; a field typed by a ``Literal`` (``compile: Literal["on", "off",
  "auto"]``, optionally ``| None``) takes one of its values, as does one declared with ``arg(..., choices=...)``;
- a field declared with ``arg(..., flags=Flags(form, convert))`` is typed as the flags of ``form`` instead, in its
  place; the parsed form is turned into the field's value by ``convert``; ``arg(..., positional=True)`` is a
  positional argument; a field declared with :func:`~sst_interp.kernels.fields.setting` is not on the command line;
- bad input (an unknown flag, a missing value, a bad number) is a :class:`~sst_interp.kernels.errors.UsageError`, so
  under :func:`~sst_interp.kernels.errors.cli_entry` it is one ``error: ...`` line on stderr and exit code 2, the same as
  every other input error.

Why not transformers' ``HfArgumentParser`` (it reads the same ``metadata["help"]``): it cannot express flags the
CLIs already have. A ``bool | None`` field becomes a flag that requires a value (``--demo-preset`` alone fails)
and gets no ``--no-...`` form; ``--no-...`` exists only for fields whose default is True (``record
--no-carry-state-across-turns`` would be lost); lists become ``nargs="+"`` (neither repeatable like
``--source-option`` nor comma-separated like ``train --sst-layers 0,1``); there is no ``KEY=ID`` mapping type;
and it always fills in defaults, so ``train --demo`` could not tell a flag that was given from one that was not.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.fields import Flags, arg

__all__ = ["CliParser", "add_config_flags", "arg", "config_from_namespace", "config_parser", "given_fields"]

C = TypeVar("C")

_SCALARS: tuple[type, ...] = (int, float, str, Path)


class CliParser(argparse.ArgumentParser):
    """An argparse parser whose errors are :class:`UsageError` (one line and exit 2 under ``cli_entry``)."""

    def error(self, message: str) -> typing.NoReturn:
        """argparse's hook for bad input: raise instead of printing the usage and exiting."""
        raise UsageError(f"{message}; see {self.prog} --help")


def config_parser(prog: str, description: str) -> CliParser:
    """An empty :class:`CliParser`; add a config's flags with :func:`add_config_flags`."""
    return CliParser(prog=prog, description=description)


def add_config_flags(parser: argparse.ArgumentParser, config_type: type, *, omit_unset: bool = False) -> None:
    """Add one flag per field of the dataclass ``config_type`` to ``parser``.

    Args:
        parser: the parser (or sub-command parser) to extend.
        config_type: a dataclass whose fields were declared with :func:`arg`.
        omit_unset: flags that are not given are left out of the parsed namespace instead of taking the field's
            default (for a CLI that layers the given flags over a preset, like ``train --demo``).
    """
    hints = typing.get_type_hints(config_type)
    for field in dataclasses.fields(config_type):
        if not field.init:
            continue
        if "help" not in field.metadata:
            raise TypeError(f"{config_type.__name__}.{field.name} has no help; declare it with "
                            "sst_interp.kernels.fields.arg")
        if field.metadata.get("command_line") is False:  # a library-only setting
            continue
        if "flags" in field.metadata:  # typed as its form's flags, in its place
            add_config_flags(parser, field.metadata["flags"].form, omit_unset=omit_unset)
            continue
        default = _field_default(field)
        if isinstance(default, tuple):  # argparse appends to a list default; given_fields hands over a tuple
            default = list(default)
        if field.metadata.get("positional"):
            parser.add_argument(field.name, **_type_options(field, hints[field.name]), help=field.metadata["help"])
            continue
        options: dict[str, Any] = {"dest": field.name, **_type_options(field, hints[field.name])}
        if "flag" in field.metadata:  # the placeholder follows the flag's name, not the field's
            options.setdefault("metavar", field.metadata["flag"].upper())
        options["help"] = _help_text(field.metadata["help"], default)
        if default is dataclasses.MISSING:
            options["required"] = True
        else:
            options["default"] = argparse.SUPPRESS if omit_unset else default
        parser.add_argument("--" + field.metadata.get("flag", field.name).replace("_", "-"), **options)


def config_from_namespace(config_type: type[C], namespace: argparse.Namespace) -> C:
    """The ``config_type`` instance of a parsed namespace (its other attributes are ignored)."""
    return config_type(**given_fields(config_type, namespace))


def given_fields(config_type: type, namespace: argparse.Namespace) -> dict[str, Any]:
    """Field name -> parsed value for each field of ``config_type`` present in ``namespace``.

    A field typed as a :class:`~sst_interp.kernels.fields.Flags` form is present when any flag of its form is; its
    value is the form's conversion (in field order, so the first bad field is the one reported)."""
    values: dict[str, Any] = {}
    hints = typing.get_type_hints(config_type)
    for field in dataclasses.fields(config_type):
        if not field.init:
            continue
        flags: Flags | None = field.metadata.get("flags")
        if flags is not None:
            given = given_fields(flags.form, namespace)
            if given:
                values[field.name] = flags.convert(flags.form(**given))
        elif hasattr(namespace, field.name):
            value = getattr(namespace, field.name)
            if typing.get_origin(_strip_optional(hints[field.name])) is tuple and isinstance(value, list):
                value = tuple(value)
            values[field.name] = value
    return values


def _field_default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def _type_options(field: dataclasses.Field, hint: Any) -> dict[str, Any]:
    """argparse keyword arguments for a field of type ``hint``."""
    kind = _strip_optional(hint)
    metadata = field.metadata
    options: dict[str, Any] = {}
    if typing.get_origin(kind) is typing.Literal:  # typed by its choices: the values are the type
        if "choices" in metadata:
            raise TypeError(f"{field.name} is typed by a Literal; its choices are the Literal's values")
        values = typing.get_args(kind)
        options.update(choices=values, type=type(values[0]))
        if "metavar" in metadata:
            options["metavar"] = metadata["metavar"]
        return options
    if "choices" in metadata:
        options["choices"] = metadata["choices"]
    if "metavar" in metadata:
        options["metavar"] = metadata["metavar"]
    if kind is bool:
        options["action"] = argparse.BooleanOptionalAction
    elif kind in _SCALARS:
        options["type"] = kind
    elif _is_sequence(kind):
        item = typing.get_args(kind)[0]
        if metadata.get("repeat"):
            options.update(action="append", type=item)
        else:
            options["type"] = _comma_list(item)
            options.setdefault("metavar", f"{item.__name__.upper()},...")
    elif kind == dict[str, int]:
        options["type"] = _parse_mapping
        options.setdefault("metavar", "KEY=ID,...")
    else:  # a new field type needs a parsing rule here
        raise TypeError(f"no CLI flag type for field {field.name}: {hint}")
    return options


def _is_sequence(kind: Any) -> bool:
    """``list[X]`` or ``tuple[X, ...]`` of a scalar ``X``."""
    args = typing.get_args(kind)
    if typing.get_origin(kind) is list:
        return len(args) == 1 and args[0] in _SCALARS
    return typing.get_origin(kind) is tuple and len(args) == 2 and args[1] is Ellipsis and args[0] in _SCALARS


def _strip_optional(hint: Any) -> Any:
    """``X | None`` -> ``X`` (other hints unchanged)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _help_text(text: str, default: Any) -> str:
    """The help text, ``%``-escaped for argparse, with the default appended when it says something."""
    text = text.replace("%", "%%")
    # identity, not equality: a default of 0 is worth showing, and 0 == False
    if any(default is nothing for nothing in (dataclasses.MISSING, None, False)) or "default" in text:
        return text
    shown = _show(default).replace("%", "%%")
    return f"{text} (default: {shown})"


def _show(value: Any) -> str:
    """A default as a user would type it on the command line."""
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "none"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) or "none"
    if value == "":
        return "''"
    return str(value)


def _comma_list(item: type) -> Callable[[str], list[Any]]:
    """A parser of ``a,b,c`` into a list of ``item`` (blank items are dropped)."""

    def parse(text: str) -> list[Any]:
        parts = [part.strip() for part in text.split(",") if part.strip()]
        try:
            return [item(part) for part in parts]
        except ValueError as err:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list of {item.__name__}, got {text!r}") from err

    return parse


def _parse_mapping(text: str) -> dict[str, int]:
    """``KEY=ID,KEY=ID`` -> {KEY: ID} (blank items are dropped; the ``=`` is the last one of an item)."""
    mapping: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, sep, value = item.rpartition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"expected KEY=ID pairs separated by commas, got {item!r}")
        try:
            mapping[key] = int(value)
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"the id must be an integer in {item!r}") from err
    return mapping
