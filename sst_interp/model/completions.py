"""One prompt completed at several iteration depths (:func:`complete_at_depths`), configured by
:class:`~sst_interp.model.generate_config.GenerateConfig`: the library behind ``python -m sst_interp.generate``.

This module loads the model stack (torch, transformers); the command imports it once its flags are parsed.
"""

from __future__ import annotations

import codecs
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sst_interp.checkpoints import resolve_checkpoint, resolve_model
from sst_interp.kernels.errors import UsageError
from sst_interp.model.compile_options import CompileOptions, setup_refusal
from sst_interp.model.compiled import compiler_for, generate_compiled
from sst_interp.model.devices import check_device, resolve_placement
from sst_interp.model.generate_config import GenerateConfig
from sst_interp.model.generation import GenerationConfig, generate
from sst_interp.model.limits import ModelLimits, check_weights_placed
from sst_interp.model.loading import (
    DEMO_PRESET_NOTE,
    ModelSpec,
    build_sst,
    check_depths,
    eos_token_ids,
    resolve_prompt_mode,
)
from sst_interp.model.loop_declaration import LoopDeclaration
from sst_interp.model.loop_folder import native_family
from sst_interp.model.loop_model import LoopModel, generate_looped, load_loop_backbone
from sst_interp.model.loop_trace import check_loop_trace
from sst_interp.model.placement import parse_device_map, parse_max_memory
from sst_interp.organism.tokenizer import check_organism_text


@dataclass(frozen=True)
class DepthCompletion:
    """The completion at one depth.

    Args:
        depth: the iteration depth.
        text: the decoded completion (special tokens skipped).
        n_tokens: tokens generated.
        seconds: wall time of the generation (the first compiled depth includes compiling).
        stop_reason: why generation stopped.
    """

    depth: int
    text: str
    n_tokens: int
    seconds: float
    stop_reason: str


def complete_at_depths(config: GenerateConfig, say: Callable[[str], None] = print) -> Iterator[DepthCompletion]:
    """Build the SST of ``config`` and complete its prompt at each depth, in order; a looped family's folder
    (HRM-Text, Inkling-2 Loop, Dory, one declared with ``--loop``) completes through its own forward instead, at
    each depth of its loop count (:func:`_complete_looped`).

    Every input is checked before the first completion (bad input is a UsageError: an empty prompt, a bad depth
    list, ``--compile on`` where the compiled step cannot serve, a prompt plus ``max_new_tokens`` beyond the
    model's context); ``say`` receives the notes (the demo preset, the compiled step) once the input is checked.
    """

    depths = check_depths(config.depths)
    if config.max_new_tokens < 1:
        raise UsageError("--max-new-tokens must be at least 1")
    if not config.prompt.strip():
        raise UsageError("--prompt is empty; give the text to continue, e.g. --prompt '7 + 5 ='")
    prompt = codecs.decode(config.prompt, "unicode_escape") if "\\" in config.prompt else config.prompt
    model = resolve_model(config.model)
    loop = native_family(model, config.loop, config.trust_remote_code)
    if loop is not None:  # a looped family's folder: its own forward, every depth a config field
        yield from _complete_looped(config, model, loop, depths, prompt)
        return
    if config.loop_options:
        raise UsageError("--loop-option sets a looped family's setting; an SST has none (drop the flag)")
    if config.compile == "on":
        refusal = ("the compiled decode step runs on one device; use --compile off" if config.device_map != "none"
                   else setup_refusal(device=config.device))
        if refusal is not None:
            raise UsageError(refusal)
    device_map = parse_device_map(config.device_map)
    device, dtype = resolve_placement(config.device, config.dtype, mapped=device_map is not None)
    spec = ModelSpec(model, resolve_checkpoint(config.checkpoint), config.state_scale, dtype, device,
                     device_map=device_map, max_memory=parse_max_memory(config.max_memory))
    sst, tokenizer = build_sst(spec)
    check_organism_text(tokenizer, prompt)  # an organism's tokenizer would turn what it lacks into <pad>
    prompt_ids = tokenizer(prompt).input_ids
    check_weights_placed(sst.backbone)
    ModelLimits.of(sst).check_new_tokens(config.max_new_tokens, len(prompt_ids))  # before any generation
    if spec.is_demo_preset:  # once the input is checked: a refused command prints its error line only
        say(f"[{DEMO_PRESET_NOTE}]")
    generation = GenerationConfig(
        max_new_tokens=config.max_new_tokens,
        prompt_mode=resolve_prompt_mode(config.prompt_mode, spec.is_demo_preset),
        eos_token_ids=eos_token_ids(tokenizer, sst),
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0,
    )
    compiler = None if device_map is not None else compiler_for(sst, CompileOptions(config.compile))
    for index, depth in enumerate(depths):
        start = time.perf_counter()
        if compiler is None:
            result = generate(sst, [prompt_ids], depth, generation)
        else:
            result = generate_compiled(sst, [prompt_ids], depth, generation, compiler=compiler)
        seconds = time.perf_counter() - start
        if compiler is not None and index == 0:
            say(f"[compiled decode step: {compiler.compile_mode}; the first depth's time includes compiling]")
        tokens = result.token_ids[0]
        yield DepthCompletion(depth, tokenizer.decode(tokens, skip_special_tokens=True), len(tokens), seconds,
                              result.stop_reasons[0])


#: The flags that configure an SST, each refused for a looped family with this reason.
_SST_ONLY = {"checkpoint": "--checkpoint loads an SST checkpoint", "state_scale": "--state-scale reads an SST's state",
             "prompt_mode": "--prompt-mode says how the prompt runs through the SST state stream"}


def _complete_looped(config: GenerateConfig, model: str, loop: LoopDeclaration, depths: list[int],
                     prompt: str) -> Iterator[DepthCompletion]:
    """Complete ``prompt`` with the looped family ``loop`` of folder ``model`` at each depth (the family's
    loop count, :attr:`~sst_interp.model.loop_declaration.LoopDeclaration.depth_key`), greedy with the KV cache, as
    ``record`` generates. Every input is checked before the first completion: the SST-only flags, the depths, the
    folder and ``--loop-option`` (where it is opened), and the declaration against the running model
    (:func:`~sst_interp.model.loop_trace.check_loop_trace`)."""
    for name, reason in _SST_ONLY.items():
        if getattr(config, name) is not None:
            raise UsageError(f"{reason}; {loop.family} has none (drop the flag)")
    if config.compile == "on" or config.device_map != "none" or config.max_memory is not None:
        raise UsageError(f"{loop.family} generates eager, on one device: drop --compile on, --device-map auto and "
                         "--max-memory")
    for depth in depths:
        loop.check_depth(depth)
    device = check_device(config.device)
    # the dtype as asked: auto honours a float64 folder on the CPU, and a cast that narrows is said on stderr
    backbone, tokenizer = load_loop_backbone(model, loop, dtype=config.dtype, device=device,
                                             trust_remote_code=config.trust_remote_code, options=config.loop_options,
                                             say=lambda note: print(note, file=sys.stderr))
    looped = LoopModel(backbone, loop)
    check_loop_trace(looped)
    check_organism_text(tokenizer, prompt)  # an organism's tokenizer would turn what it lacks into <pad>
    prompt_ids = list(tokenizer(prompt).input_ids)
    ModelLimits.of(looped).check_new_tokens(config.max_new_tokens, len(prompt_ids))
    generation = GenerationConfig(max_new_tokens=config.max_new_tokens, eos_token_ids=eos_token_ids(tokenizer, looped),
                                  pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
    for depth in depths:
        start = time.perf_counter()
        result = generate_looped(looped, [prompt_ids], depth, generation)
        tokens = result.token_ids[0]
        yield DepthCompletion(depth, tokenizer.decode(tokens, skip_special_tokens=True), len(tokens),
                              time.perf_counter() - start, result.stop_reasons[0])
