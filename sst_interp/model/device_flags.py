"""Where and how a command runs its model: ``--dtype``, ``--device``, ``--device-map``, ``--max-memory`` and
``--compile``, each declared once (its values, its default, what ``auto`` means, its help text).

Every command that loads a model (``record``, ``generate``, ``train``, ``intervene``) declares these fields on its
own config with the factories below, so the flags read the same everywhere and the configs keep them as plain
fields (``options.device``, ``config.dtype``, as their saved JSON has them). A field typed by a ``Literal`` is a
flag typed by its choices (:mod:`sst_interp.cli.args`), so each value set below is written once, as its type.

This module imports no torch: a config module imports it, and ``--help`` answers without the model stack.
Resolving the values against the machine (is CUDA there? which GPU?) is :mod:`sst_interp.model.devices` and
:mod:`sst_interp.model.placement`.
"""

from __future__ import annotations

import typing
from typing import Any, Literal

from sst_interp.kernels.fields import arg

#: ``--dtype`` of the commands that record or generate (the stored hidden-state dtypes, and ``auto``).
Dtype = Literal["auto", "float32", "bfloat16"]
DTYPES: tuple[str, ...] = typing.get_args(Dtype)
#: What ``auto`` means for ``--dtype``, in words (:func:`auto_dtype` is the rule).
AUTO_DTYPE_TEXT = "auto: bfloat16 on CUDA, float32 on the CPU"

#: What ``--device`` accepts, in words (its help and the messages of a bad value).
DEVICE_HELP = "auto (cuda when available, else cpu), cpu, cuda, cuda:N (the GPU index) or mps"

#: ``--device-map``: ``none`` (the whole model on ``--device``) or ``auto`` (accelerate places the layers).
DeviceMapChoice = Literal["none", "auto"]
DEVICE_MAP_CHOICES: tuple[str, ...] = typing.get_args(DeviceMapChoice)

#: ``--compile``: decode through the compiled step (``on``), eager (``off``), or by :func:`compiles` (``auto``).
CompileChoice = Literal["on", "off", "auto"]
COMPILE_CHOICES: tuple[str, ...] = typing.get_args(CompileChoice)
DEFAULT_COMPILE: CompileChoice = "auto"


def auto_dtype(device: str) -> str:
    """What ``--dtype auto`` means on ``device`` (resolved): bfloat16 on a GPU, float32 on the CPU, where bfloat16
    matmuls are slow and the exactness tests run."""
    return "bfloat16" if str(device).startswith("cuda") else "float32"


def compiles(choice: str, device_type: str) -> bool:
    """Whether ``--compile choice`` compiles decode passes on a device of type ``device_type`` (``cuda``, ``cpu``):
    ``auto`` compiles on CUDA only, since on the CPU the first question pays a compilation that costs more than the
    questions of a short run save (docs/scaling.md)."""
    return choice == "on" or (choice == "auto" and device_type == "cuda")


def dtype_arg(*, stored: bool = False) -> Any:
    """The ``dtype`` field (default ``auto``); its values are the field's ``Literal`` type (:data:`Dtype`, or
    train's wider set). ``stored``: the command records a run, whose hidden states are stored in this dtype."""
    also = "; also the stored dtype of hidden states (the resolved one is recorded)" if stored else ""
    return arg("auto", help=f"the model's compute dtype ({AUTO_DTYPE_TEXT}){also}")


def device_arg(*, typed: bool = False, mapped: bool = False) -> Any:
    """The ``device`` field (default ``auto``). ``typed``: the field's ``Literal`` type lists the devices this
    command takes (instead of :data:`DEVICE_HELP`); ``mapped``: the command also has ``--device-map``."""
    text = "torch device (auto: cuda when available, else cpu)" if typed else f"torch device: {DEVICE_HELP}"
    return arg("auto", help=text + ("; not used with --device-map auto" if mapped else ""))


def device_map_arg() -> Any:
    """The ``device_map`` field, typed :data:`DeviceMapChoice` (default ``none``)."""
    return arg("none", help="none (default: the whole model on --device) | auto (a model bigger than one device: "
                            "accelerate spreads the layers over the GPUs, then the CPU; each layer's state stream "
                            "stays with its layer)")


def max_memory_arg() -> Any:
    """The ``max_memory`` field (``str | None``; parsed by :func:`sst_interp.model.placement.parse_max_memory`)."""
    return arg(None, metavar="DEVICE=SIZE,...",
               help="with --device-map auto: memory budget per device, e.g. 0=20GiB,cpu=60GiB (default: what "
                    "accelerate finds free)")


def compile_arg() -> Any:
    """The ``compile`` field, typed :data:`CompileChoice` (default :data:`DEFAULT_COMPILE`)."""
    return arg(DEFAULT_COMPILE,
               help="decode through the compiled step (CUDA graphs on CUDA, torch.compile on the CPU; compiled once "
                    "per batch size, the first use pays the compilation) or eager; auto compiles on CUDA where "
                    "the step can serve the run (one device, single-turn completions, no hook-reading depth policy "
                    "or intervention the step cannot carry) and decodes eager elsewhere")
