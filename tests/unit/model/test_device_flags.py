"""The device flags (``--dtype``, ``--device``, ``--device-map``, ``--max-memory``, ``--compile``) are declared once
(:mod:`sst_interp.model.device_flags`): every command that has one shows the same help, values and default."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Literal

import pytest

from sst_interp.cli import generate, intervene, record, train
from sst_interp.cli.args import add_config_flags, arg
from sst_interp.kernels.errors import UsageError
from sst_interp.model.device_flags import (COMPILE_CHOICES, DEFAULT_COMPILE, DEVICE_MAP_CHOICES, DTYPES, auto_dtype,
                                           compile_arg, compiles, device_arg, device_map_arg, dtype_arg,
                                           max_memory_arg)

FLAGS = ("--dtype", "--device", "--device-map", "--max-memory", "--compile")


def _commands() -> dict[str, argparse.ArgumentParser]:
    root = intervene.build_parser()
    sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    parsers = {"record": record.build_parser(), "generate": generate.build_parser(), "train": train.build_parser()}
    parsers.update({f"intervene {name}": parser for name, parser in sub.choices.items()})
    return parsers


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {o: a for a in parser._actions for o in a.option_strings if o in FLAGS}


def _declared() -> dict[str, set[str]]:
    """Flag -> the help texts its declaration gives (a variant per command kind: recording or not, ...)."""
    def helps(*fields: dataclasses.Field) -> set[str]:
        return {field.metadata["help"] for field in fields}

    return {"--dtype": helps(dtype_arg(), dtype_arg(stored=True)),
            "--device": helps(device_arg(), device_arg(mapped=True), device_arg(typed=True)),
            "--device-map": helps(device_map_arg()), "--max-memory": helps(max_memory_arg()),
            "--compile": helps(compile_arg())}


def test_each_flag_reads_as_declared_in_every_command():
    declared = _declared()
    commands = {name: _actions(parser) for name, parser in _commands().items()}
    assert set(commands["record"]) == set(commands["generate"]) == set(FLAGS)
    assert all({"--dtype", "--device"} <= set(actions) for actions in commands.values())
    for name, actions in commands.items():
        for flag, action in actions.items():
            # argparse's help is the declared text, with the default appended where the text does not say it
            assert any(action.help.startswith(text) for text in declared[flag]), (name, flag, action.help)
            if action.default is not argparse.SUPPRESS:  # train leaves unset flags to its preset
                assert action.default == ("none" if flag == "--device-map" else None if flag == "--max-memory"
                                          else "auto"), (name, flag)
    assert commands["record"]["--dtype"].help == commands["intervene window"]["--dtype"].help  # both record a run
    assert commands["record"]["--device"].help == commands["generate"]["--device"].help


def test_the_closed_value_sets_are_typed_by_their_choices():
    for name in ("record", "generate"):
        actions = _actions(_commands()[name])
        assert actions["--compile"].choices == COMPILE_CHOICES and actions["--compile"].default == DEFAULT_COMPILE
        assert actions["--device-map"].choices == DEVICE_MAP_CHOICES
        assert actions["--dtype"].choices == DTYPES


def test_auto_compiles_on_cuda_only_and_picks_the_dtype_by_device():
    assert compiles("auto", "cuda") and not compiles("auto", "cpu") and compiles("on", "cpu")
    assert not compiles("off", "cuda")
    assert auto_dtype("cuda:1") == "bfloat16" and auto_dtype("cpu") == "float32"


def test_a_literal_field_is_a_flag_of_its_values():
    @dataclasses.dataclass
    class Config:
        mode: Literal["fast", "slow"] = arg("fast", help="how")
        maybe: Literal["a", "b"] | None = arg(None, help="which")

    parser = argparse.ArgumentParser()
    add_config_flags(parser, Config)
    assert parser.parse_args(["--mode", "slow"]).mode == "slow" and parser.parse_args([]).maybe is None
    assert "{fast,slow}" in parser.format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["--mode", "medium"])


def test_a_literal_field_does_not_also_take_choices():
    @dataclasses.dataclass
    class Config:
        mode: Literal["fast", "slow"] = arg("fast", choices=("fast",), help="how")

    with pytest.raises(TypeError, match="Literal"):
        add_config_flags(argparse.ArgumentParser(), Config)


def test_the_library_still_checks_what_argparse_would():
    from sst_interp.model.compile_options import CompileOptions

    with pytest.raises(UsageError, match="--compile takes one of on, off, auto"):
        CompileOptions("maybe")  # type: ignore[arg-type]
