"""Whether a run decodes through the compiled step (``--compile``): :class:`CompileOptions`, and why a model or
setup cannot (:func:`compile_refusal`, one line naming ``--compile off``). The step itself is
:mod:`sst_interp.model.compiled`; how ``torch.compile`` is called is :mod:`sst_interp.model.compile_recipe`.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any

import torch

from sst_interp.kernels.errors import UsageError
from sst_interp.model.column_cache import MASK_FORMATS
from sst_interp.model.depth_policy import DepthPolicy
from sst_interp.model.device_flags import COMPILE_CHOICES, DEFAULT_COMPILE, CompileChoice, compiles
from sst_interp.model.sst import SSTModel


@dataclass(frozen=True)
class CompileOptions:
    """How decode passes run.

    Args:
        enabled: ``--compile``: ``on``, ``off``, or ``auto``
            (:func:`~sst_interp.model.device_flags.compiles` says where ``auto`` compiles).
        mode: the ``torch.compile`` mode; ``None`` picks ``reduce-overhead`` (CUDA graphs) on CUDA, the default
            mode elsewhere.
    """

    enabled: CompileChoice = DEFAULT_COMPILE
    mode: str | None = None

    def __post_init__(self) -> None:
        if self.enabled not in COMPILE_CHOICES:
            raise UsageError(f"--compile takes one of {', '.join(COMPILE_CHOICES)}, got {self.enabled!r}")

    def active_for(self, device: torch.device) -> bool:
        """Whether decode passes compile on ``device``."""
        return compiles(self.enabled, device.type)

    def mode_for(self, device: torch.device) -> str:
        """The ``torch.compile`` mode on ``device``."""
        return self.mode or ("reduce-overhead" if device.type == "cuda" else "default")


def compile_refusal(sst: SSTModel, policy: DepthPolicy | None = None, intervention: Any = None) -> str | None:
    """Why this model and setup cannot decode compiled (one line naming ``--compile off``), or None when it can.

    ``intervention``: the active :class:`~sst_interp.interventions.apply.Intervener` (its ``compiled_refusal()``
    names what of it the step's tensor form cannot carry), or None.
    """
    implementation = getattr(sst.backbone.config, "_attn_implementation", None)
    if implementation not in MASK_FORMATS:
        return (f"the compiled decode step supports attention implementations {', '.join(MASK_FORMATS)}, "
                f"not {implementation!r}; use --compile off")
    if intervention is not None:
        refusal = intervention.compiled_refusal()
        if refusal is not None:
            return refusal
    return setup_refusal(probe_policy=getattr(policy, "probe_layer", None) is not None, device=sst.device.type)


def setup_refusal(*, probe_policy: bool = False, device: str = "cpu") -> str | None:
    """The checks of :func:`compile_refusal` that need no model (``record`` runs them before loading one; it checks
    an intervention spec with :func:`sst_interp.interventions.compiled.spec_refusal`)."""
    if probe_policy:
        return "depth policies that read a layer through a hook cannot run compiled; use --compile off"
    if str(device).split(":")[0] in ("cpu", "auto") and not (str(device) == "auto" and torch.cuda.is_available()) \
            and not _c_compiler():
        return ("torch.compile on the CPU needs a C compiler (set CXX or install g++) for the inductor; "
                "use --compile off")
    return None


def _c_compiler() -> str | None:
    # the inductor's C++ backend looks for these (CXX first); a compiler named but not installed does not count
    named = os.environ.get("CXX", "").split()
    candidates = ([named[0]] if named else []) + ["g++", "clang++", "c++"]
    return next((path for path in map(shutil.which, candidates) if path), None)
