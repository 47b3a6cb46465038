"""``python -m sst_interp.generate`` (also ``sst-generate``): print the completion of one prompt at several
iteration depths.

The quickest way to see an SST work::

    python -m sst_interp.generate --prompt "Q: 17 + 25 = ?\nA:" --depths 1,2,3,4
"""

from __future__ import annotations

import argparse
import codecs
import time
from dataclasses import dataclass

from sst_interp.cli.args import add_config_flags, arg, config_from_namespace, config_parser
from sst_interp.kernels.errors import UsageError, cli_entry
from sst_interp.model.config import PROMPT_MODES
from sst_interp.checkpoints import resolve_checkpoint


@dataclass(frozen=True)
class GenerateFlags:
    """The flags of ``python -m sst_interp.generate`` (one flag per field); :func:`main` turns them into a
    :class:`~sst_interp.model.loading.ModelSpec` and a :class:`~sst_interp.model.generation.GenerationConfig`."""

    prompt: str = arg(help="prompt text; \\n escapes are expanded")
    depths: list[int] = arg(default_factory=lambda: [1, 2, 3, 4], help="comma-separated iteration depths")
    model: str = arg("default", help="default | local HF folder | .gguf file | hub id (default: default)")
    checkpoint: str | None = arg(None, help="SST checkpoint folder (sst_config.json + state), or a named "
                                                "checkpoint: demo-codeact | demo-codeact-baseline")
    state_scale: str | None = arg(None, choices=("unit", "hidden"),
                                  help="state read scale of an untrained SST (default: hidden on the default "
                                       "backbone)")
    max_new_tokens: int = arg(32, help="most tokens generated per depth")
    prompt_mode: str | None = arg(None, choices=PROMPT_MODES,
                                  help="two_pass | sequential | none (default: none under the demo preset, else "
                                       "two_pass)")
    dtype: str = arg("auto", choices=("auto", "float32", "bfloat16"),
                     help="the model's compute dtype (auto: bfloat16 on CUDA, float32 on the CPU)")
    compile: str = arg("auto", choices=("on", "off", "auto"),
                       help="decode through the compiled step (CUDA graphs on CUDA, torch.compile on the CPU; the "
                            "first depth pays the compilation, printed once) or eager; auto: on on CUDA")
    device: str = arg("auto", help="torch device: auto (cuda when available) | cpu | cuda | cuda:N; not used with "
                                   "--device-map auto")
    device_map: str = arg("none", help="none (default: the whole model on --device) | auto (a model bigger than one "
                                       "device: accelerate spreads the layers over the GPUs, then the CPU)")
    max_memory: str | None = arg(None, metavar="DEVICE=SIZE,...",
                                 help="with --device-map auto: memory budget per device, e.g. 0=20GiB,cpu=60GiB")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; every flag maps to a :class:`GenerateFlags` field."""
    parser = config_parser("python -m sst_interp.generate", __doc__.split("\n\n")[0])
    add_config_flags(parser, GenerateFlags)
    return parser


@cli_entry
def main(argv: list[str] | None = None) -> int:
    """Print the completion of ``--prompt`` at each of ``--depths``; returns the exit code."""
    args = config_from_namespace(GenerateFlags, build_parser().parse_args(argv))
    # The model stack (torch, transformers) is imported after parsing, so --help and bad flags answer at once.
    from sst_interp.model.devices import resolve_placement
    from sst_interp.model.generation import GenerationConfig, generate
    from sst_interp.model.limits import ModelLimits, check_weights_placed
    from sst_interp.model.loading import (DEMO_PRESET_NOTE, ModelSpec, build_sst, check_depths, eos_token_ids,
                                          resolve_prompt_mode)
    from sst_interp.model.placement import parse_device_map, parse_max_memory

    from sst_interp.model.compiled import CompileOptions, compiler_for, generate_compiled, setup_refusal

    depths = check_depths(args.depths)
    if args.compile == "on":
        refusal = ("the compiled decode step runs on one device; use --compile off" if args.device_map != "none"
                   else setup_refusal(device=args.device))
        if refusal is not None:
            raise UsageError(refusal)
    if args.max_new_tokens < 1:
        raise UsageError("--max-new-tokens must be at least 1")
    if not args.prompt.strip():
        raise UsageError("--prompt is empty; give the text to continue, e.g. --prompt '7 + 5 ='")
    device_map = parse_device_map(args.device_map)
    device, dtype = resolve_placement(args.device, args.dtype, mapped=device_map is not None)
    spec = ModelSpec(args.model, resolve_checkpoint(args.checkpoint), args.state_scale, dtype, device,
                     device_map=device_map, max_memory=parse_max_memory(args.max_memory))
    sst, tokenizer = build_sst(spec)
    prompt = codecs.decode(args.prompt, "unicode_escape") if "\\" in args.prompt else args.prompt
    prompt_ids = tokenizer(prompt).input_ids
    check_weights_placed(sst.backbone)
    ModelLimits.of(sst).check_new_tokens(args.max_new_tokens, len(prompt_ids))  # before any generation
    if spec.is_demo_preset:  # once the input is checked: a refused command prints its error line only
        print(f"[{DEMO_PRESET_NOTE}]")
    config = GenerationConfig(
        max_new_tokens=args.max_new_tokens,
        prompt_mode=resolve_prompt_mode(args.prompt_mode, spec.is_demo_preset),
        eos_token_ids=eos_token_ids(tokenizer, sst),
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0,
    )
    compiler = None if device_map is not None else compiler_for(sst, CompileOptions(args.compile))
    for index, depth in enumerate(depths):
        start = time.perf_counter()
        if compiler is None:
            result = generate(sst, [prompt_ids], depth, config)
        else:
            result = generate_compiled(sst, [prompt_ids], depth, config, compiler=compiler)
        seconds = time.perf_counter() - start
        if compiler is not None and index == 0:
            print(f"[compiled decode step: {compiler.compile_mode}; the first depth's time includes compiling]")
        text = tokenizer.decode(result.token_ids[0], skip_special_tokens=True)
        n = len(result.token_ids[0])
        print(f"--- depth {depth} ({n} tokens, {seconds:.1f} s, stop: {result.stop_reasons[0]})")
        print(text)
    return 0


def console() -> int:
    """The ``sst-generate`` console script."""
    return main()
