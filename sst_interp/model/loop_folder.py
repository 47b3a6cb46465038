"""Opening the folder of a looped model: which loop declaration it runs with (:func:`native_family`), the
declaration's modules checked on a weightless copy (:func:`check_declaration_on_model`), the ``--loop-option``
settings checked and set on its config (:func:`apply_loop_options`), and its weights' shapes checked against its
config (:func:`check_weight_shapes`), each before any weight is read.

``record``, ``generate`` and the intervention experiments open a folder through these, so a folder that cannot be
recorded is one :class:`~sst_interp.kernels.errors.UsageError` line before anything loads or is written.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from huggingface_hub.errors import StrictDataclassError
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, AutoModelForCausalLM

from sst_interp.kernels.errors import UsageError
from sst_interp.model.backbone import load_folder_part
from sst_interp.model.loop_declaration import LoopDeclaration
from sst_interp.model.loop_file import load_loop_file
from sst_interp.model.loops import loop_for_model_type, native_loop


def native_family(model: str | None, loop: str | None = None, trust_remote_code: bool = False) -> Any:
    """The :class:`~sst_interp.model.loop_declaration.LoopDeclaration` of a local model folder whose ``config.json``
    names a natively looping family, or the user's declaration ``loop`` (``FILE.py:NAME``, checked against a
    weightless copy of the folder's model); None for SST backbones, GGUF files and hub ids (loaded as before).
    Refused (a :class:`UsageError`, before any weight loads): a ``model_type`` no family serves, a bad ``--loop``,
    a folder with its own code without ``trust_remote_code``, and ``--trust-remote-code`` or ``--loop`` for an
    SST."""

    folder = Path(model) if model else None
    config = folder / "config.json" if folder is not None and folder.is_dir() else None
    if config is None or not config.is_file():
        if loop is not None:
            raise UsageError(f"--loop needs --model to be a local Hugging Face folder (with config.json), got "
                             f"{model!r}")
        if trust_remote_code:
            raise UsageError("--trust-remote-code applies to a local --model folder with its own modelling code")
        return None
    try:
        fields = json.loads(config.read_text())
        model_type = fields.get("model_type")
    except (json.JSONDecodeError, AttributeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{config} is not a readable Hugging Face config: {exc}") from exc
    if fields.get("auto_map") and not trust_remote_code:
        raise UsageError(f"{model} holds its own modelling code (config.json auto_map: "
                         f"{', '.join(sorted(fields['auto_map']))}); pass --trust-remote-code to run it")
    if loop is not None:
        declaration = load_loop_file(loop)
        check_declaration_on_model(declaration, str(folder), trust_remote_code)
        return declaration
    if fields.get("auto_map") and native_loop(model_type) is None:
        raise UsageError(f"{model} is a model transformers does not ship (model_type {model_type!r}); declare its "
                         "loop and pass --loop FILE.py:NAME (docs/bring-your-own.md)")
    loop_for_model_type(model_type)
    found = native_loop(model_type)
    if found is None and trust_remote_code:
        raise UsageError("--trust-remote-code applies to looped models (--loop, or a family's folder); an SST "
                         "backbone is loaded without remote code")
    return found


def skeleton(folder: str, config: Any, trust_remote_code: bool) -> torch.nn.Module:
    """The model ``config`` builds, on the meta device: every module and parameter shape, no weight read or
    allocated."""
    with torch.device("meta"):
        return load_folder_part(folder, "modelling code", AutoModelForCausalLM.from_config, config,
                                trust_remote_code=trust_remote_code)


def check_declaration_on_model(loop: LoopDeclaration, folder: str, trust_remote_code: bool) -> None:
    """Refuse (UsageError) a declaration whose modules are not in ``folder``'s model: the model is built from its
    config on the meta device (no weight is read or allocated) and the declaration's check runs on it."""

    if loop.check_model is None:
        return
    config = load_folder_part(folder, "config", AutoConfig.from_pretrained, folder,
                              trust_remote_code=trust_remote_code)
    loop.check_model(skeleton(folder, config, trust_remote_code))


def check_weight_shapes(folder: str, model: torch.nn.Module, config: Any, prefix: str | None = None) -> None:
    """Refuse (UsageError) a folder whose safetensors weights do not fit the model its config builds (``model``,
    a :func:`skeleton`): a ``hidden_size`` that disagrees with the weights, say. Only the files' headers are read.
    The error names the first tensor that differs, both shapes, and the config fields whose value is a size the
    config builds but the weights lack. ``prefix``: the key prefix of a wrapper's text model
    (:attr:`LoopDeclaration.wrapped`), read as ``model.``."""

    expected = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    # a checkpoint may name the model's first module otherwise (Dory's files say backbone.layers.0, its model
    # model.layers.0): a key is also matched by what follows its first part, where that is unique
    tails = Counter(name.partition(".")[2] for name in expected)
    by_tail = {name.partition(".")[2]: name for name in expected if tails[name.partition(".")[2]] == 1}
    wrong: list[tuple[str, str, tuple[int, ...], tuple[int, ...]]] = []
    for file in sorted(Path(folder).glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt") as handle:
                for key in handle.keys():
                    name = "model." + key[len(prefix):] if prefix and key.startswith(prefix) else key
                    name = name if name in expected else by_tail.get(name.partition(".")[2], "")
                    shape = tuple(handle.get_slice(key).get_shape())
                    if name in expected and expected[name] != shape:
                        wrong.append((file.name, key, shape, expected[name]))
        except (OSError, SafetensorError) as err:
            raise UsageError(f"could not load the weights of model folder {folder}: {file.name}: {err}") from err
    if not wrong:
        return
    file, name, found, built = wrong[0]
    sizes = set(built) - set(found)
    fields = sorted(key for key, value in config.to_dict().items()
                    if isinstance(value, int) and not isinstance(value, bool) and value in sizes)
    hint = f" (config fields of that size: {', '.join(fields)})" if fields else ""
    more = f", and {len(wrong) - 1} more tensors" if len(wrong) > 1 else ""
    raise UsageError(f"the weights of model folder {folder} do not fit its config.json: {name} is "
                     f"{list(found)} in {file} but the config builds {list(built)}{hint}{more}; correct config.json "
                     "(or the weights)")


def _declared_type(config: Any, name: str) -> Any:
    """The type the config class declares for field ``name`` (a strict dataclass config's annotation), or the type
    of the value it holds (a plain ``PretrainedConfig``)."""
    if dataclasses.is_dataclass(config):
        for field in dataclasses.fields(config):
            if field.name == name and not isinstance(field.type, str):
                return field.type
    return type(getattr(config, name))


def option_value(loop: LoopDeclaration, config: Any, name: str, text: str) -> Any:
    """``text`` as the value of option ``name`` of ``config``: one of the config class's allowed values (a
    ``Literal`` field), or converted to the type it holds; a UsageError otherwise."""
    if name not in loop.options:
        declared = ", ".join(loop.options) or "none"
        depth = f"; --depths sets {name}" if name == loop.depth_key else ""
        raise UsageError(f"--loop-option {name}: {loop.family} declares no such setting (settings changeable at "
                         f"inference: {declared}){depth}")
    kind = _declared_type(config, name)
    allowed = typing.get_args(kind) if typing.get_origin(kind) is typing.Literal else ()
    if allowed:
        match = [value for value in allowed if str(value) == text]
        if not match:
            raise UsageError(f"--loop-option {name}={text}: {type(config).__name__} allows "
                             f"{', '.join(map(str, allowed))}")
        return match[0]
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise UsageError(f"--loop-option {name}={text}: a boolean, true or false")
        return text.lower() == "true"
    if kind in (int, float):
        try:
            return kind(text)
        except ValueError as err:
            raise UsageError(f"--loop-option {name}={text}: {type(config).__name__}.{name} is {kind.__name__}") \
                from err
    return text


def apply_loop_options(loop: LoopDeclaration, config: Any, options: dict[str, str]) -> dict[str, Any]:
    """Set each option on ``config`` (before the model is built from it), checked by :func:`option_value`;
    returns the values set. A value the config class still refuses is a UsageError naming its reason."""
    values = {name: option_value(loop, config, name, text) for name, text in sorted(options.items())}
    for name, value in values.items():
        try:
            setattr(config, name, value)
        except (StrictDataclassError, TypeError, ValueError) as err:  # the config class's own validation
            cause = err.__cause__ if err.__cause__ is not None else err
            raise UsageError(f"--loop-option {name}={options[name]}: {cause}") from err
    return values
