"""What ``python -m sst_interp.generate`` completes, and with which SST (:class:`GenerateConfig`, one flag per
field). Kept apart from :mod:`sst_interp.model.completions`, which loads the model stack, so that the command shows
its flags without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from sst_interp.kernels.fields import arg
from sst_interp.model.config import PROMPT_MODES
from sst_interp.model.device_flags import (
    CompileChoice,
    DeviceMapChoice,
    Dtype,
    compile_arg,
    device_arg,
    device_map_arg,
    dtype_arg,
    max_memory_arg,
)
from sst_interp.model.loop_options import LOOP_OPTION_FLAGS


@dataclass(frozen=True)
class GenerateConfig:
    """What to complete and with which model (an SST, or a looped family's folder); one ``python -m
    sst_interp.generate`` flag per field."""

    prompt: str = arg(help="prompt text; \\n escapes are expanded")
    depths: list[int] = arg(default_factory=lambda: [1, 2, 3, 4], help="comma-separated iteration depths")
    model: str = arg("default", help="default | local HF folder (an SST backbone, or a looped family's: HRM-Text, "
                                          "Inkling-2 Loop, Dory, or your own with --loop) | .gguf file | hub id | "
                                          "hops-organism (the shipped looped organism) | hops-sst-backbone (the SST "
                                          "organism's backbone, with --checkpoint hops-sst) (default: default)")
    loop: str | None = arg(None, metavar="FILE.py:NAME",
                           help="a looped model transformers does not ship: the loop declaration NAME in your Python "
                                "file FILE.py (docs/bring-your-own.md), for the local --model folder")
    trust_remote_code: bool = arg(False, help="run the modelling code in the --model folder (its config.json "
                                              "auto_map); off by default: a folder with its own code is refused "
                                              "without it")
    loop_options: dict[str, str] = arg(default_factory=dict, flags=LOOP_OPTION_FLAGS,
                                       help="settings the looped family declares changeable at inference, by name "
                                            "(--loop-option KEY=VALUE; dory: recurrent_kv_cache_mode)")
    checkpoint: str | None = arg(None, help="SST checkpoint folder (sst_config.json + state), or a named "
                                                "checkpoint: demo-codeact | demo-codeact-baseline | hops-sst")
    state_scale: str | None = arg(None, choices=("unit", "hidden"),
                                  help="state read scale of an untrained SST (default: hidden on the default "
                                       "backbone)")
    max_new_tokens: int = arg(32, help="most tokens generated per depth")
    prompt_mode: str | None = arg(None, choices=PROMPT_MODES,
                                  help="two_pass | sequential | none (default: none under the demo preset, else "
                                       "two_pass)")
    dtype: Dtype = dtype_arg()
    compile: CompileChoice = compile_arg()
    device: str = device_arg(mapped=True)
    device_map: DeviceMapChoice = device_map_arg()
    max_memory: str | None = max_memory_arg()
