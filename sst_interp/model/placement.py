"""Where a model's modules live and run: ``--device-map`` / ``--max-memory``, and execution devices.

A model bigger than one device is loaded with accelerate's big-model loading (transformers'
``device_map="auto"``): decoder layers are spread over the GPUs (then the CPU, then the disk), and accelerate wraps
each placed module's forward in a hook that moves its inputs to the device it runs on. Modules mapped to ``cpu``
(next to GPUs) or ``disk`` are *offloaded*: their weights stay there as ``meta`` parameters in the module and are
copied to the main device for each forward. So where a module runs (its execution device) is not always where its
parameters seem to be; :func:`execution_device` answers the first question, which is the one the SST needs (the
state stream of layer i lives where layer i runs).
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import torch
from accelerate import infer_auto_device_map, init_empty_weights
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM

from sst_interp.kernels.errors import UsageError
from sst_interp.model.device_flags import DEVICE_MAP_CHOICES

#: A device map as transformers takes it: ``"auto"`` or an explicit {module name: device} (int = GPU index,
#: ``"cpu"``, ``"disk"``, ``"cuda:1"``, ...).
DeviceMap = str | dict[str, int | str]

_SIZE = re.compile(r"^\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?$", re.IGNORECASE)


def parse_device_map(text: str | None) -> str | None:
    """``--device-map`` -> ``None`` (``none``, the default) or ``"auto"``; anything else is a UsageError."""
    if text is None or text == "none":
        return None
    if text == "auto":
        return "auto"
    raise UsageError(f"--device-map must be one of {', '.join(DEVICE_MAP_CHOICES)}, got {text!r} (auto spreads the "
                     "layers over the GPUs, then the CPU; none keeps the whole model on --device)")


def parse_max_memory(text: str | None) -> dict[int | str, str] | None:
    """``--max-memory 0=20GiB,1=20GiB,cpu=60GiB`` -> ``{0: "20GiB", 1: "20GiB", "cpu": "60GiB"}`` (None when unset).

    Keys are GPU indices or ``cpu``; sizes are bytes or a number with a unit (KB, MB, GB, KiB, MiB, GiB, ...).
    A malformed item, a GPU this machine does not have, or a repeated key is a UsageError.
    """
    if text is None:
        return None
    budget: dict[int | str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        key, sep, size = (piece.strip() for piece in item.partition("="))
        if not sep or not key or not _SIZE.match(size):
            raise UsageError(f"--max-memory {text!r}: write DEVICE=SIZE pairs separated by commas, e.g. "
                             "0=20GiB,cpu=60GiB (DEVICE is a GPU index or cpu)")
        device: int | str = int(key) if key.isdigit() else key.lower()
        if device != "cpu" and not isinstance(device, int):
            raise UsageError(f"--max-memory {text!r}: unknown device {key!r}; use a GPU index (0, 1, ...) or cpu")
        if isinstance(device, int) and device >= torch.cuda.device_count():
            raise UsageError(f"--max-memory {text!r}: this machine has no GPU {device} "
                             f"({torch.cuda.device_count()} visible); give budgets for the GPUs it has, or cpu")
        if device in budget:
            raise UsageError(f"--max-memory {text!r}: device {key!r} is given twice")
        budget[device] = size.replace(" ", "")
    return budget


def check_placement(device_map: DeviceMap | None, max_memory: dict[int | str, str] | None) -> None:
    """Refuse combinations transformers would misread: an unknown map name, or a budget without ``auto``."""
    if isinstance(device_map, str):
        parse_device_map(device_map)
    elif device_map is not None and not isinstance(device_map, dict):
        raise UsageError(f"a device map is 'auto' or a {{module name: device}} dict, got {type(device_map).__name__}")
    if max_memory is not None and device_map != "auto":
        raise UsageError("--max-memory sets the budgets of --device-map auto; add --device-map auto or drop "
                         "--max-memory")


def execution_device(module: nn.Module) -> torch.device:
    """The device ``module`` computes on.

    Under accelerate's dispatch that is its hook's execution device (an offloaded module's parameters are on
    ``meta``); otherwise the device of its first parameter or buffer that is not on ``meta``.
    """
    hook = getattr(module, "_hf_hook", None)
    # A SequentialHook chains several hooks; the one that aligns devices names the execution device.
    for candidate in getattr(hook, "hooks", (hook,)):
        device = getattr(candidate, "execution_device", None)
        if device is not None:
            return torch.device(device)
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        if tensor.device.type != "meta":
            return tensor.device
    raise ValueError(f"{type(module).__name__} has no tensor off the meta device and no accelerate hook naming "
                     "where it runs")


def offloaded_modules(model: nn.Module) -> list[str]:
    """Names of the modules accelerate offloaded (weights on the disk, or on the CPU while GPUs compute), in the
    order of ``model.hf_device_map``; empty when nothing is offloaded or the model was not dispatched."""
    device_map = getattr(model, "hf_device_map", None) or {}
    # accelerate's rule (dispatch_model): with any accelerator in the map, "cpu" entries are offloaded to it too.
    compute = {str(device) for device in device_map.values()} - {"cpu", "disk"}
    offloaded = {"disk", "cpu"} if compute else {"disk"}
    return [name for name, device in device_map.items() if str(device) in offloaded]


def placement_summary(model: nn.Module) -> dict[str, Any] | None:
    """The module -> device map accelerate dispatched ``model`` with (for manifests), or None when it was not."""
    device_map = getattr(model, "hf_device_map", None)
    return None if device_map is None else {str(name): str(device) for name, device in device_map.items()}


def check_budget_places_weights(folder: str, max_memory: dict[int | str, str] | None, dtype: torch.dtype) -> None:
    """Refuse (UsageError) a ``--max-memory`` under which accelerate would offload every module of the model in
    ``folder`` to the disk: the model would run one module at a time from the disk, at no useful speed, and
    transformers only warns. Planned on empty (meta) weights, before any weight is read."""
    if not max_memory:
        return

    with init_empty_weights():
        empty = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder), dtype=dtype)
    empty.tie_weights()  # as from_pretrained does; accelerate warns about untied weights otherwise
    planned = infer_auto_device_map(empty, max_memory=dict(max_memory), dtype=dtype,
                                    no_split_module_classes=getattr(empty, "_no_split_modules", None) or [])
    if planned and all(str(device) == "disk" for device in planned.values()):
        raise UsageError(f"--max-memory {','.join(f'{k}={v}' for k, v in max_memory.items())} leaves no room for "
                         "any weight: the device map would offload the whole model to the disk; give budgets that "
                         "hold the model's layers (e.g. cpu=8GiB), or drop --max-memory")
