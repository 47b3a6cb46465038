"""How the decode step is handed to ``torch.compile``: the mode's options on CUDA, and on the CPU the weights frozen
into the graph (:data:`CPU_FREEZING`) with GEMM autotuning for large models, patched around every call.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch


# The CPU compilation. Decoding one row reads every weight once per pass, and ATen's matrix-vector products read a
# [out, in] weight at about half the machine's memory bandwidth (the default backbone's tied LM head, 671 MB: 60-72 ms
# through F.linear, 36 ms from a transposed copy, on the 2-core machine). Freezing folds the weights into the graph as
# constants, so the inductor packs them once into its GEMMs' blocked layout; on a model large enough for it to pay,
# max-autotune's C++ GEMM template is then timed beside ATen for each product. Measured on the default backbone at
# batch 1: 145 ms per token compiled without these against 151 eager (bench/results/compile_intervene.log), 70 with
# them against 144 (bench/results/compile_frozen.log). The cost: the packed copies sit beside the model's own weights
# (resident memory 3.7 GB instead of 1.9 GB for the 270M backbone in float32), a step variant compiles in 2-3 minutes
# instead of 15-43 s, and the graph reads the weights it froze, so DecodeStep refuses to run once they change. The
# config patch around each call (_patched) costs about 0.1 ms, 0.3% of a 70 ms token.
CPU_FREEZING: dict[str, Any] = {"freezing": True}
CPU_GEMM_AUTOTUNE: dict[str, Any] = {"max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN",
                                     # its timing tables, one per product, would otherwise go to the user's terminal
                                     "autotune_num_choices_displayed": 0, "max_autotune_report_choices_stats": False}
# Below this a step is dispatch-bound, not bandwidth-bound, and the autotuning (about 45 s more compilation of a
# 3-layer test model) buys nothing: the test suite's tiny models compile without it, the 270M backbone with it.
GEMM_AUTOTUNE_MIN_PARAMETERS = 50_000_000


def freezes_weights(mode: str | None, device: torch.device) -> bool:
    """Whether :func:`compile_fn` folds the weights into the graph (the CPU's default mode)."""
    return mode == "default" and device.type == "cpu"


def cpu_options(module: torch.nn.Module) -> dict[str, Any]:
    """The inductor's settings for compiling ``module``'s decode step on the CPU: freezing, and the GEMM autotuning
    from :data:`GEMM_AUTOTUNE_MIN_PARAMETERS` parameters on."""
    large = sum(parameter.numel() for parameter in module.parameters()) >= GEMM_AUTOTUNE_MIN_PARAMETERS
    return {**CPU_FREEZING, **(CPU_GEMM_AUTOTUNE if large else {})}


def weights_fingerprint(module: torch.nn.Module) -> tuple[tuple[int, int], ...]:
    """(address, version counter) of every parameter and buffer: changes when any is replaced or edited in place."""
    return tuple((tensor.data_ptr(), tensor._version) for tensor in (*module.parameters(), *module.buffers()))


def compile_fn(fn, mode: str, device: torch.device, cpu_settings: dict[str, Any] | None = None):
    """``torch.compile(fn)`` for the decode step: the whole graph (``fullgraph``), static shapes.

    ``reduce-overhead`` on CUDA also turns on the inductor's coordinate-descent tuning of its kernels' launch
    parameters: on one H100 at the paper's shape it took the plain step from 27.3 to 24.2 ms (median of three), for
    50 s more compilation (docs/scaling.md, "On a GPU"; its log is no longer in the repository). The CPU's default
    mode runs under ``cpu_settings`` (:func:`cpu_options`; freezing alone when None).
    """
    if mode == "reduce-overhead" and device.type == "cuda":
        # torch.compile takes a mode or options, not both: these are reduce-overhead's options plus the tuning
        return torch.compile(fn, fullgraph=True, dynamic=False,
                             options={"triton.cudagraphs": True, "coordinate_descent_tuning": True})
    if freezes_weights(mode, device):
        return _patched(torch.compile(fn, fullgraph=True, dynamic=False), cpu_settings or CPU_FREEZING)
    return torch.compile(fn, mode=mode, fullgraph=True, dynamic=False)


def own_code(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` (bound) rebound to a fresh copy of its code object: torch.compile's graphs cached for the copy are
    its own, never another copy's."""
    function = method.__func__
    copy = types.FunctionType(function.__code__.replace(), function.__globals__, function.__name__,
                              function.__defaults__, function.__closure__)
    return types.MethodType(copy, method.__self__)


def _patched(compiled, settings: dict[str, Any]):
    """``compiled`` run with the inductor's config patched by ``settings``. Compilation happens at the first call (and
    at any recompilation), so the patch is set around every call: passed as ``torch.compile(options=...)`` instead,
    the freezing did not take effect (torch 2.13: a compiled 671 MB head took 60 ms so, 38-42 ms patched)."""
    def run(*args: Any) -> Any:
        with torch._inductor.config.patch(settings):
            return compiled(*args)
    return run
