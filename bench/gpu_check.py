"""GPU checklist: what the CPU test suite cannot show, checked on a CUDA machine in one command.

Run from the repository root on a CUDA machine (``pip install -e '.[cuda]'`` for bitsandbytes)::

    python bench/gpu_check.py [--model default] [--checkpoint DIR] [--sandbox subprocess]

Checks, each one row of the summary table printed at the end:

1. ``precision``: bfloat16 generation against float32 on the backbone (the demo preset on the default one) over
   the demo questions, at every depth of ``--depths``: the token agreement rate per depth (matching tokens at the
   same generated position / positions of the longer answer), identical answers, accuracy in both dtypes.
   Fails when an agreement rate is below ``--min-agreement``.
2. ``qlora``: ``--train-steps`` two-pass training steps with the backbone loaded in 4-bit NF4 (``--quantize nf4``,
   bitsandbytes) and LoRA on the paper's targets, on one batch of demo text: loss per step and step time
   (:func:`bench_train.train_step`, the step ``bench/bench_train.py`` times). Fails on a non-finite loss.
3. ``record``: :func:`sst_interp.record.record_questions` of the demo questions at ``--depths`` into a temporary
   run directory, read back with :class:`sst_interp.store.Run`: generated tokens per second of recording; then
   the recording ratio (record / generate of the same backbone, side by side) from
   :func:`bench_record.bench_recording`. Fails when the run is incomplete or the ratio exceeds
   ``--max-record-ratio`` (the project's target is 1.05; the line says whether that is met).
4. ``episodes``: the tests' scripted CodeACT episodes on the GPU in float32 and bfloat16 against the CPU
   (:func:`gpu_episode_check.compare_with_cpu`). Fails when float32 tokens differ from the CPU's.
5. ``device-map``: with 2 or more GPUs, ``--device-map auto`` spreads the layers over them; generation and
   recorded values must equal the single-GPU run's (each layer's state stream lives on its layer's GPU).
   Skipped with one GPU.

Exit code 0 when no check failed (skipped ones do not fail), 1 when one did. Without CUDA the script says so in
one line and exits 2, unless ``--cpu-smoke`` is given: then every check runs on the CPU with a tiny random Gemma 3
(``sst_interp.model.testing.tiny_gemma3``) and small sizes, so that the script's code is exercised; the 4-bit part
is skipped (bitsandbytes NF4 needs CUDA) and plain LoRA steps run in its place, the episodes compare the CPU with
itself, and the device map offloads a layer to the disk (the one dispatch a CPU can do).
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the bench/ and tests/ helpers reused below are imported from the repository root

# The checks import what they use when they run: the refusal without CUDA and --help stay quick.
from sst_interp.cli.args import add_config_flags, arg, config_parser, given_fields  # noqa: E402
from sst_interp.kernels.errors import UsageError, cli_entry  # noqa: E402
from bench.paper_shape_check import PHASES as PAPER_SHAPE_PHASES  # noqa: E402

CHECKS: tuple[str, ...] = ("precision", "qlora", "record", "episodes", "codeact", "device-map")
OK, FAIL, SKIPPED = "ok", "FAIL", "skipped"
DESIGN_RECORD_RATIO = 1.05


@dataclass
class GpuCheckArgs:
    """Options of ``bench/gpu_check.py`` (one flag per field; ``--cpu-smoke`` lowers the sizes, see SMOKE)."""

    cpu_smoke: bool = arg(False, help="run every check on the CPU with a tiny random model (exercises the script; "
                                      "the 4-bit part is skipped)")
    checks: list[str] = arg(default_factory=lambda: list(CHECKS), help=f"checks to run: {', '.join(CHECKS)}")
    model: str = arg("default", help="backbone: default | local HF folder | hub id")
    checkpoint: str | None = arg(None, help="SST checkpoint folder or named checkpoint (demo-codeact) for the "
                                            "precision, record and device-map checks (default: the untrained demo "
                                            "preset on the default backbone)")
    questions: int = arg(24, help="demo questions generated and recorded")
    depths: list[int] = arg(default_factory=lambda: [1, 2, 3, 4], help="iteration depths compared and recorded")
    max_new_tokens: int = arg(16, help="most tokens per answer (16: the demo set's record default)")
    batch_size: int = arg(8, help="prompts per generation batch")
    min_agreement: float = arg(0.5, help="precision fails when a depth's bf16/fp32 token agreement is below this")
    train_steps: int = arg(5, help="two-pass QLoRA steps")
    train_tokens: int = arg(256, help="tokens in the training batch")
    ratio_depth: int = arg(2, help="depth of the record / generate ratio (as bench/bench_record.py --depth)")
    repeats: int = arg(3, help="interleaved repeats of the record / generate ratio")
    max_record_ratio: float = arg(1.5, help="record fails when record / generate exceeds this")
    sandbox: str = arg("bwrap", choices=("bwrap", "subprocess"), help="how the episodes' code runs")
    episode_train_steps: int = arg(400, help="training steps of the scripted episode model (on the CPU)")
    data: str | None = arg(None, help="GSM8K folder (holding test.jsonl) for the codeact check (default: "
                                      "$SST_INTERP_DATA_DIR/gsm8k; the check is skipped without one)")
    codeact_questions: int = arg(16, help="GSM8K questions of the codeact check")
    codeact_depths: list[int] = arg(default_factory=lambda: [1, 2], help="depths of the codeact check")
    codeact_max_new_tokens: int = arg(128, help="tokens per model turn in the codeact check (the README's setting)")
    cpu_reference: str | None = arg(None, help="a CPU float32 run of the codeact check's command to compare with "
                                               "(default: recorded on this machine's CPU first)")
    paper_shape: bool = arg(False, help="instead of the checks: Gemma 3 27B's shape with random bf16 weights "
                                        "(bench/paper_shape_check.py): plain HF vs SST decoding, recording, writer, "
                                        "QLoRA two-pass vs one-pass, peak memory; one table")
    layers: int | None = arg(None, help="with --paper-shape: keep only the first N of the 62 layers (a smaller "
                                        "device; default: all)")
    json: str | None = arg(None, help="with --paper-shape: also write the table as JSON to this file, rewritten after "
                                      "every phase (a run cut off by a time limit keeps the phases it finished); a "
                                      "result the docs cite goes to bench/results/ (tracked), e.g. "
                                      "bench/results/paper_shape_h100_<date>.json")
    phases: list[str] | None = arg(None, help="with --paper-shape: run only these phases (some of plain, compiled, sst, "
                                              "record, qlora; default: all)")
    profile: bool = arg(False, help="with --paper-shape: print a torch.profiler summary of plain and SST decoding")

    def __post_init__(self) -> None:
        unknown = sorted(set(self.checks) - set(CHECKS))
        if unknown or not self.checks:
            raise UsageError(f"--checks {','.join(self.checks)}: use some of {', '.join(CHECKS)}")
        for name in ("questions", "max_new_tokens", "batch_size", "train_steps", "train_tokens", "ratio_depth",
                     "repeats", "episode_train_steps", "codeact_questions", "codeact_max_new_tokens"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if not self.depths or min(self.depths) < 1:
            raise UsageError(f"--depths must be integers >= 1, got {self.depths}")
        if self.layers is not None and self.layers < 1:
            raise UsageError(f"--layers must be at least 1, got {self.layers}")
        if not self.paper_shape and (self.layers is not None or self.json is not None or self.profile
                                     or self.phases is not None):
            raise UsageError("--layers, --json, --phases and --profile belong to --paper-shape; add --paper-shape")
        if self.phases is not None and (not self.phases or set(self.phases) - set(PAPER_SHAPE_PHASES)):
            raise UsageError(f"--phases {','.join(self.phases)}: use some of {', '.join(PAPER_SHAPE_PHASES)}")

    @property
    def device(self) -> str:
        return "cpu" if self.cpu_smoke else "cuda"


#: What ``--cpu-smoke`` changes (flags given on the command line still win): sizes for seconds on one CPU core,
#: no agreement threshold (a random tiny model sits near ties, so bf16 flips tokens that mean nothing) and no
#: ratio threshold (tiny batches on a shared CPU time noise, not recording).
SMOKE: dict[str, Any] = dict(questions=3, depths=[1, 2], max_new_tokens=5, batch_size=3, min_agreement=0.0,
                             train_steps=2, train_tokens=48, repeats=1, max_record_ratio=float("inf"),
                             episode_train_steps=5, codeact_questions=2, codeact_depths=[1],
                             codeact_max_new_tokens=12)
#: Tokens of the codeact check's float32 device run that may differ from the CPU run: 1%. Float32 matrix products
#: add in a different order on a GPU (logits differ by about 1e-5), which flips a greedy choice only at a near-tie.
FLOAT32_MIN_AGREEMENT = 0.99


@dataclass
class CheckResult:
    """One row of the summary: ``status`` is ok, FAIL or skipped; ``result`` the numbers in one line."""

    name: str
    status: str
    result: str
    details: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------ models
def load_sst(config: GpuCheckArgs, dtype: str, device_map: Any = None, folder: Path | None = None):
    """(sst, tokenizer, prompt mode) on the check's device: the configured backbone, or under ``--cpu-smoke`` the
    tiny random Gemma 3 (from ``folder`` when given: a saved copy, so that a device map can load it)."""
    from sst_interp.checkpoints import resolve_checkpoint
    from sst_interp.model import SSTConfig, SSTModel
    from sst_interp.model.backbone import parse_dtype
    from sst_interp.model.loading import ModelSpec, build_sst, resolve_prompt_mode

    if config.cpu_smoke and folder is None:
        from sst_interp.model.testing import char_tokenizer, tiny_gemma3

        backbone = tiny_gemma3(dtype=parse_dtype(dtype))
        return SSTModel.from_backbone(backbone, SSTConfig(state_scale="hidden")), char_tokenizer(), "none"
    if folder is not None:  # the smoke's saved tiny model: an untrained SST, as above
        spec = ModelSpec(str(folder), None, "hidden", dtype, config.device, device_map=device_map)
    else:
        spec = ModelSpec(config.model, resolve_checkpoint(config.checkpoint), None, dtype, config.device,
                         device_map=device_map)
    sst, tokenizer = build_sst(spec)
    return sst, tokenizer, resolve_prompt_mode(None, spec.is_demo_preset or folder is not None)


def free_memory() -> None:
    """Drop unreferenced models before the next check loads its own (GPU memory is cached by torch)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def generation_config(sst, tokenizer, config: GpuCheckArgs, prompt_mode: str):
    """Greedy decoding as ``record`` does it on the demo set: EOS and the demo stop strings end an answer, the LM
    head runs after every iteration."""
    from sst_interp.data import stop_strings
    from sst_interp.model import GenerationConfig
    from sst_interp.model.loading import eos_token_ids

    return GenerationConfig(max_new_tokens=config.max_new_tokens, prompt_mode=prompt_mode,
                            eos_token_ids=eos_token_ids(tokenizer, sst), stop_strings=stop_strings("demo"),
                            pad_token_id=tokenizer.pad_token_id or 0, logits_every_iteration=True)


def generate_answers(sst, tokenizer, prompts: Sequence[list[int]], depth: int, config: GpuCheckArgs,
                     prompt_mode: str) -> list[list[int]]:
    """Greedy answers of ``prompts`` at ``depth``, in batches of ``config.batch_size``."""
    from sst_interp.model import generate

    gen = generation_config(sst, tokenizer, config, prompt_mode)
    answers: list[list[int]] = []
    for start in range(0, len(prompts), config.batch_size):
        result = generate(sst, list(prompts[start:start + config.batch_size]), depth, gen,
                          decode_fn=lambda tokens: tokenizer.decode(tokens, skip_special_tokens=True))
        answers.extend(result.token_ids)
    return answers


def token_agreement(reference: Sequence[Sequence[int]], other: Sequence[Sequence[int]]) -> float:
    """Tokens equal at the same generated position, over the positions of the longer answer of each pair, summed
    over the pairs (1.0 = identical answers; 1.0 too when there is nothing to compare)."""
    matched = sum(sum(a == b for a, b in zip(x, y)) for x, y in zip(reference, other, strict=True))
    positions = sum(max(len(x), len(y)) for x, y in zip(reference, other, strict=True))
    return matched / positions if positions else 1.0


# ------------------------------------------------------------------------------------------------ checks
def check_precision(config: GpuCheckArgs) -> CheckResult:
    """bf16 against fp32 generation over the demo questions, per depth."""
    from sst_interp.data import grade, load_questions

    questions = load_questions("demo", limit=config.questions)
    answers: dict[tuple[str, int], list[list[int]]] = {}
    accuracy: dict[tuple[str, int], float] = {}
    for dtype in ("float32", "bfloat16"):
        sst, tokenizer, prompt_mode = load_sst(config, dtype)
        prompts = [tokenizer(q.prompt).input_ids for q in questions]
        for depth in config.depths:
            answers[dtype, depth] = generate_answers(sst, tokenizer, prompts, depth, config, prompt_mode)
            texts = [tokenizer.decode(tokens, skip_special_tokens=True) for tokens in answers[dtype, depth]]
            accuracy[dtype, depth] = statistics.mean(grade(q, t).correct for q, t in zip(questions, texts))
        del sst
        free_memory()
    rates = {d: token_agreement(answers["float32", d], answers["bfloat16", d]) for d in config.depths}
    details = []
    for depth in config.depths:
        same = sum(a == b for a, b in zip(answers["float32", depth], answers["bfloat16", depth]))
        details.append(f"depth {depth}: token agreement {rates[depth]:.3f}; identical answers {same}/"
                       f"{len(questions)}; accuracy fp32 {accuracy['float32', depth]:.2f}, bf16 "
                       f"{accuracy['bfloat16', depth]:.2f}")
    status = OK if min(rates.values()) >= config.min_agreement else FAIL
    summary = ", ".join(f"d{d} {rate:.2f}" for d, rate in rates.items())
    return CheckResult("precision", status, f"bf16/fp32 token agreement {summary} (min {config.min_agreement})",
                       details)


def check_qlora(config: GpuCheckArgs) -> CheckResult:
    """Two-pass training steps with a 4-bit NF4 backbone (plain LoRA under --cpu-smoke)."""
    from bench.bench_train import make_batch, train_step
    from sst_interp.train.config import TrainConfig
    from sst_interp.train.modeling import build_train_model, load_training_backbone, training_device, training_dtype
    from sst_interp.train.optim import build_optimizer

    with tempfile.TemporaryDirectory(prefix="gpu_check_train_") as out:
        train = TrainConfig(train_data="unused", out=out, model=config.model, device=config.device,
                            quantize="none" if config.cpu_smoke else "nf4")
        device = training_device(train)
        if config.cpu_smoke:
            from sst_interp.model.testing import char_tokenizer, tiny_gemma3

            backbone, tokenizer = tiny_gemma3(dtype=torch.float32), char_tokenizer()
        else:
            backbone, tokenizer = load_training_backbone(train, device, training_dtype(train, device))
        torch.manual_seed(0)
        model = build_train_model(backbone, train)
        optimizer = build_optimizer(model.lora_parameters(), model.sst_parameters(), train)
        batch = make_batch(tokenizer, config.train_tokens)
        losses, seconds = [], []
        for _ in range(config.train_steps):
            loss, took = train_step(model, optimizer, batch, train.ce_chunk_size)
            losses.append(loss)
            seconds.append(took)
    del model, optimizer, backbone
    free_memory()
    details = [f"step {i + 1}: loss {loss:.4f}, {took:.3f} s" for i, (loss, took) in enumerate(zip(losses, seconds))]
    timed = seconds[1:] or seconds  # the first step pays for kernel set-up
    numbers = (f"loss {losses[0]:.3f} -> {losses[-1]:.3f}, {statistics.median(timed):.3f} s/step "
               f"({config.train_steps} steps, {config.train_tokens} tokens)")
    if not all(math.isfinite(loss) for loss in losses):
        return CheckResult("qlora", FAIL, f"non-finite loss: {numbers}", details)
    if config.cpu_smoke:
        return CheckResult("qlora", SKIPPED, f"4-bit skipped: bitsandbytes NF4 needs CUDA; plain LoRA instead: "
                                             f"{numbers}", details)
    return CheckResult("qlora", OK, f"nf4 {numbers}", details)


def check_record(config: GpuCheckArgs) -> CheckResult:
    """A small recorded run (tokens/s) and the record / generate ratio of bench/bench_record.py."""
    from bench.bench_record import bench_recording
    from sst_interp.data import load_questions
    from sst_interp.record import RecordOptions, record_questions
    from sst_interp.store import Run

    dtype = "float32" if config.cpu_smoke else "bfloat16"
    sst, tokenizer, prompt_mode = load_sst(config, dtype)
    questions = load_questions("demo", limit=config.questions)
    args = RecordOptions(questions="demo", depths=list(config.depths), dtype=dtype,
                      max_new_tokens=config.max_new_tokens, batch_size=config.batch_size, prompt_mode=prompt_mode)
    with tempfile.TemporaryDirectory(prefix="gpu_check_record_") as root:
        started = time.perf_counter()
        record_questions(sst, tokenizer, questions, args, Path(root) / "run")
        seconds = time.perf_counter() - started
        run = Run.open(Path(root) / "run")
        generations = run.generations()
        complete = run.depths == sorted(config.depths) and len(generations) == len(questions) * len(config.depths)
        values = next(iter(run.hidden(config.depths[0]))).values
    tokens = int(generations["n_tokens"].sum())
    timing = bench_recording(sst, tokenizer, argparse.Namespace(
        batch=config.batch_size, new_tokens=config.max_new_tokens, full_positions=10, sketch_positions=512,
        dtype=dtype, depth=config.ratio_depth, repeats=config.repeats))
    del sst
    free_memory()
    ratio = timing["record_ratio"]
    details = [f"recorded {len(generations)} answers ({tokens} tokens) at depths {config.depths} in {seconds:.2f} s; "
               f"hidden {values.shape} {values.dtype}",
               f"depth {config.ratio_depth}: generate {timing['generate']:.3f} s/batch, record "
               f"{timing['record_amortised']:.3f} s/batch, record/generate {ratio:.3f} (target "
               f"{DESIGN_RECORD_RATIO}: {'met' if ratio <= DESIGN_RECORD_RATIO else 'not met'})"]
    status = OK if complete and ratio <= config.max_record_ratio else FAIL
    result = (f"{tokens / seconds:.1f} tokens/s recorded; record/generate {ratio:.3f} at depth {config.ratio_depth} "
              f"(fail above {config.max_record_ratio})" + ("" if complete else "; the run is INCOMPLETE"))
    return CheckResult("record", status, result, details)


def check_episodes(config: GpuCheckArgs) -> CheckResult:
    """The scripted CodeACT episodes on the device against the CPU (bench/gpu_episode_check.py)."""
    from sst_interp.sandbox import SandboxConfig, check_backend

    sandbox = SandboxConfig(backend=config.sandbox)
    try:
        check_backend(sandbox)
    except UsageError as err:  # no sandbox is a property of the machine, not a failure of the code under check
        return CheckResult("episodes", SKIPPED, f"{err} (or pass --sandbox subprocess)")
    from bench.gpu_episode_check import compare_with_cpu

    loss, rows = compare_with_cpu(config.device, sandbox, steps=config.episode_train_steps)
    details = [f"scripted model loss {loss:.4f}"] + [
        f"depth {r.depth} {r.dtype:>8}: tokens equal to cpu: {r.tokens_equal}; stops {r.stops}; max |logit - cpu| "
        f"at position 0: {r.max_logit_diff:.2e}; recorded hidden {r.hidden}" for r in rows]
    f32 = [r for r in rows if r.dtype == "float32"]
    bf16 = [r for r in rows if r.dtype == "bfloat16"]
    versus = "the CPU against itself (smoke)" if config.cpu_smoke else "CPU"
    result = (f"tokens equal to {versus}: float32 {sum(r.tokens_equal for r in f32)}/{len(f32)} depths, bfloat16 "
              f"{sum(r.tokens_equal for r in bf16)}/{len(bf16)}; max |logit diff| bf16 "
              f"{max(r.max_logit_diff for r in bf16):.1e}")
    return CheckResult("episodes", OK if all(r.tokens_equal for r in f32) else FAIL, result, details)


def check_codeact(config: GpuCheckArgs) -> CheckResult:
    """CodeACT episodes of ``demo-codeact`` on GSM8K recorded on the device (float32 and bfloat16) against the CPU.

    The run is ``python -m sst_interp.record --protocol codeact`` with the README's settings. Float32 must agree with
    the CPU on at least :data:`FLOAT32_MIN_AGREEMENT` of the tokens (near-ties aside, identical); bfloat16 on at
    least ``--min-agreement`` (the same bound as the precision check), with its accuracy shown beside the CPU's.
    """
    import os

    from sst_interp.sandbox import SandboxConfig, check_backend

    data = config.data or (str(Path(os.environ["SST_INTERP_DATA_DIR"]) / "gsm8k")
                           if os.environ.get("SST_INTERP_DATA_DIR") else None)
    if data is None or not (Path(data) / "test.jsonl").is_file():
        return CheckResult("codeact", SKIPPED, "no GSM8K test.jsonl: pass --data PATH/gsm8k")
    try:
        check_backend(SandboxConfig(backend=config.sandbox))
    except UsageError as err:
        return CheckResult("codeact", SKIPPED, f"{err} (or pass --sandbox subprocess)")
    with tempfile.TemporaryDirectory(prefix="gpu_check_codeact_") as root:
        reference = Path(config.cpu_reference) if config.cpu_reference else _record_codeact(
            config, data, "cpu", "float32", Path(root) / "cpu")
        rows, details = [], []
        for dtype in ("float32", "bfloat16"):
            run = _record_codeact(config, data, config.device, dtype, Path(root) / dtype)
            comparison = compare_generations(reference, run)
            rows.append((dtype, comparison))
            details += [f"{dtype} depth {depth}: {line}" for depth, line in comparison["lines"].items()]
    f32, bf16 = rows[0][1], rows[1][1]
    ok = f32["agreement"] >= FLOAT32_MIN_AGREEMENT and bf16["agreement"] >= config.min_agreement
    result = (f"{config.codeact_questions} GSM8K episodes x depths {config.codeact_depths}, sandbox {config.sandbox}: "
              f"token agreement with the CPU float32 {f32['agreement']:.3f} (min {FLOAT32_MIN_AGREEMENT}), "
              f"bfloat16 {bf16['agreement']:.3f} (min {config.min_agreement}); identical episodes float32 "
              f"{f32['identical']}/{f32['episodes']}, bfloat16 {bf16['identical']}/{bf16['episodes']}")
    return CheckResult("codeact", OK if ok else FAIL, result, details)


def _record_codeact(config: GpuCheckArgs, data: str, device: str, dtype: str, out: Path) -> Path:
    from sst_interp.cli.record import main as record_main

    record_main(["--protocol", "codeact", "--questions", "gsm8k", "--data", data,
                 "--limit", str(config.codeact_questions), "--depths", ",".join(map(str, config.codeact_depths)),
                 "--max-new-tokens", str(config.codeact_max_new_tokens), "--max-turns", "3", "--batch-size", "16",
                 "--sketch-positions", "64", "--device", device, "--dtype", dtype, "--sandbox", config.sandbox,
                 "--out", str(out)])
    free_memory()
    return out


def compare_generations(reference: Path, other: Path) -> dict[str, Any]:
    """Turn-by-turn tokens of two runs of the same questions and depths (``generations.parquet``).

    Returns ``agreement`` (tokens equal at the same turn and position / positions of the longer turn, over every
    turn of either run), ``identical`` and ``episodes`` (question-depths whose every turn is equal), and ``lines``:
    per depth, the agreement, identical episodes and accuracy of both runs.
    """
    import pandas as pd

    def turns(run: Path) -> dict[tuple[str, int, int], list[int]]:
        frame = pd.read_parquet(run / "generations.parquet", columns=["question_id", "depth", "turn", "token_ids"])
        return {(q, int(d), int(t)): list(ids) for q, d, t, ids in frame.itertuples(index=False)}

    def accuracy(run: Path) -> dict[int, tuple[int, int]]:
        frame = pd.read_parquet(run / "generations.parquet", columns=["question_id", "depth", "turn", "correct"])
        last = frame.sort_values("turn").groupby(["question_id", "depth"]).tail(1)
        return {int(d): (int(g["correct"].sum()), len(g)) for d, g in last.groupby("depth")}

    ref, oth = turns(reference), turns(other)
    keys = sorted(set(ref) | set(oth))
    per_depth: dict[int, list[tuple[int, int]]] = {}
    episodes: dict[tuple[str, int], bool] = {}
    for key in keys:
        a, b = ref.get(key, []), oth.get(key, [])
        matched = sum(x == y for x, y in zip(a, b))
        per_depth.setdefault(key[1], []).append((matched, max(len(a), len(b))))
        episodes[key[:2]] = episodes.get(key[:2], True) and a == b
    acc_ref, acc_oth = accuracy(reference), accuracy(other)
    lines = {}
    for depth, pairs in sorted(per_depth.items()):
        total = sum(n for _, n in pairs)
        same = [ok for (_, d), ok in episodes.items() if d == depth]
        lines[depth] = (f"token agreement {sum(m for m, _ in pairs) / total if total else 1.0:.3f}; identical "
                        f"episodes {sum(same)}/{len(same)}; accuracy CPU {acc_ref[depth][0]}/{acc_ref[depth][1]}, "
                        f"this run {acc_oth[depth][0]}/{acc_oth[depth][1]}")
    total = sum(n for pairs in per_depth.values() for _, n in pairs)
    matched = sum(m for pairs in per_depth.values() for m, _ in pairs)
    return {"agreement": matched / total if total else 1.0, "identical": sum(episodes.values()),
            "episodes": len(episodes), "lines": lines}


def check_device_map(config: GpuCheckArgs) -> CheckResult:
    """The model spread over several devices generates and records exactly what it does on one."""
    if not config.cpu_smoke and torch.cuda.device_count() < 2:
        return CheckResult("device-map", SKIPPED, f"needs 2+ GPUs ({torch.cuda.device_count()} visible): on one GPU "
                                                  "nothing crosses devices")
    with tempfile.TemporaryDirectory(prefix="gpu_check_map_") as root:
        folder, device_map = None, "auto"
        if config.cpu_smoke:
            folder, device_map = _saved_tiny_model(Path(root)), _TINY_LAYER1_ON_DISK
        plain = _recorded_answers(config, load_sst(config, "float32", folder=folder))
        free_memory()
        mapped_sst, tokenizer, prompt_mode = load_sst(config, "float32", device_map=device_map, folder=folder)
        placement = dict(getattr(mapped_sst.backbone, "hf_device_map", None) or {})
        mapped = _recorded_answers(config, (mapped_sst, tokenizer, prompt_mode))
        del mapped_sst
        free_memory()
    devices = sorted({str(device) for device in placement.values()})
    spread = len(devices) > 1 or "disk" in devices
    tokens_equal = all(plain[d][0] == mapped[d][0] for d in config.depths)
    diff = max(float((plain[d][1] - mapped[d][1]).abs().max()) for d in config.depths)
    result = (f"layers on {', '.join(devices) or 'one device'}: tokens equal {tokens_equal}, max |hidden diff| "
              f"{diff:.1e}")
    status = OK if spread and tokens_equal else FAIL
    return CheckResult("device-map", status, result + ("" if spread else "; the map did NOT spread the model"),
                       [f"placement: {placement}"])


_TINY_LAYER1_ON_DISK = {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "disk",
                        "model.layers.2": "cpu", "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}


def _saved_tiny_model(root: Path) -> Path:
    from sst_interp.model.testing import char_tokenizer, tiny_gemma3

    tiny_gemma3(dtype=torch.float32).save_pretrained(root / "tiny")
    char_tokenizer().save_pretrained(root / "tiny")
    return root / "tiny"


def _recorded_answers(config: GpuCheckArgs, loaded) -> dict[int, tuple[list[list[int]], torch.Tensor]]:
    """{depth: (answers, recorded hidden values [N, d] float32 on the CPU)} of the demo questions."""
    from sst_interp.data import load_questions
    from sst_interp.hooks import RecordConfig, Recorder
    from sst_interp.model import generate

    sst, tokenizer, prompt_mode = loaded
    questions = load_questions("demo", limit=config.questions)
    gen = generation_config(sst, tokenizer, config, prompt_mode)
    out = {}
    for depth in config.depths:
        answers: list[list[int]] = []
        values: list[torch.Tensor] = []
        for start in range(0, len(questions), config.batch_size):
            batch = questions[start:start + config.batch_size]
            with Recorder.for_model(sst, [q.question_id for q in batch],
                                    RecordConfig(full_positions=2, sketch_positions=0)) as recorder:
                result = generate(sst, [tokenizer(q.prompt).input_ids for q in batch], depth, gen, observer=recorder,
                                  decode_fn=lambda tokens: tokenizer.decode(tokens, skip_special_tokens=True))
            answers.extend(result.token_ids)
            values.append(recorder.columns()["hidden"]["values"].float().cpu())
        out[depth] = (answers, torch.cat(values))
    return out


CHECK_FUNCTIONS: dict[str, Callable[[GpuCheckArgs], CheckResult]] = {
    "precision": check_precision, "qlora": check_qlora, "record": check_record, "episodes": check_episodes,
    "codeact": check_codeact, "device-map": check_device_map,
}


# ------------------------------------------------------------------------------------------------ driver
def run_check(name: str, config: GpuCheckArgs) -> CheckResult:
    """Run one check; an exception is that check's FAIL (its traceback goes to stderr), not the end of the list."""
    print(f"== {name}", flush=True)
    started = time.perf_counter()
    try:
        result = CHECK_FUNCTIONS[name](config)
    except Exception as err:  # noqa: BLE001 - reported as this check's failure with its traceback
        traceback.print_exc()
        result = CheckResult(name, FAIL, f"{type(err).__name__}: {' '.join(str(err).split())[:200]}")
    for line in result.details:
        print(f"   {line}")
    print(f"   ({time.perf_counter() - started:.1f} s)", flush=True)
    return result


def format_table(results: Sequence[CheckResult]) -> str:
    """The summary: one row per check (check, status, result)."""
    width = max(len("check"), *(len(r.name) for r in results))
    lines = [f"{'check':<{width}}  {'status':<7}  result", f"{'-' * width}  {'-' * 7}  {'-' * 6}"]
    lines += [f"{r.name:<{width}}  {r.status:<7}  {r.result}" for r in results]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> GpuCheckArgs:
    """The command line over the :data:`SMOKE` sizes under --cpu-smoke; bad input is a UsageError."""
    parser = config_parser("python bench/gpu_check.py", __doc__.split("\n\n")[0])
    add_config_flags(parser, GpuCheckArgs, omit_unset=True)
    given = given_fields(GpuCheckArgs, parser.parse_args(argv))
    return GpuCheckArgs(**{**(SMOKE if given.get("cpu_smoke") else {}), **given})


def run_paper_shape_table(config: GpuCheckArgs) -> int:
    """``--paper-shape``: bench/paper_shape_check.py's table (and JSON); exit 1 when a phase raised."""
    import platform

    import transformers

    from bench.paper_shape_check import ShapeSettings, floor_goal_line, format_rows, run_paper_shape, write_json

    settings = ShapeSettings(device=config.device, dtype=torch.float32 if config.cpu_smoke else torch.bfloat16,
                             layers=config.layers or (PAPER_SHAPE_SMOKE_LAYERS if config.cpu_smoke else None),
                             smoke=config.cpu_smoke, profile=config.profile,
                             phases=tuple(config.phases or PAPER_SHAPE_PHASES),
                             **(PAPER_SHAPE_SMOKE if config.cpu_smoke else {}))
    device = "CPU (smoke: shrunk shape)" if config.cpu_smoke else torch.cuda.get_device_name(0)
    environment = {"device": device, "torch": torch.__version__, "transformers": transformers.__version__,
                   "python": platform.python_version(), "layers": config.layers or 62,
                   "bitsandbytes": _version_of("bitsandbytes"), "dtype": str(settings.dtype)}
    print(f"gpu_check --paper-shape: {device}; torch {torch.__version__}; transformers {transformers.__version__}; "
          f"bitsandbytes {environment['bitsandbytes']}", flush=True)
    def save(rows: list) -> None:
        if config.json:
            write_json(Path(config.json), rows, environment)

    rows, _ = run_paper_shape(settings, save)
    print()
    print(format_rows(rows))
    if config.json:
        print(f"\nwrote {config.json}")
    missed = [row.name for row in rows if row.status == "NOT met"]
    print(f"\ngoals {'missed: ' + ', '.join(missed) if missed else 'all met'}")
    print(floor_goal_line(rows, settings.device) + (" (smoke: a shrunk shape in the cache, not judged)"
                                                     if config.cpu_smoke else ""))
    unmeasured = [row.name for row in rows if row.status.startswith("not measured")]
    if unmeasured:
        print(f"not measured (timing noise larger than the steps; rerun with more tokens): {', '.join(unmeasured)}")
    return 1 if any(row.result.startswith("FAILED") for row in rows) else 0


#: Sizes of ``--paper-shape --cpu-smoke``: seconds on one CPU core (7 layers: one full-attention layer after five
#: sliding-window ones, and one more).
PAPER_SHAPE_SMOKE_LAYERS = 7
PAPER_SHAPE_SMOKE: dict[str, Any] = dict(prompt_tokens=8, decode_tokens=4, record_tokens=6, depths=(1, 2),
                                         record_depths=(1, 2), batch_sizes=(1, 2), train_tokens=16, train_steps=1,
                                         repeats=1, blend_variants=("eager",))


def _version_of(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """Run the checklist; returns the exit code (0: nothing failed, 1: a check failed)."""
    config = parse_args(argv)
    if not config.cpu_smoke and not torch.cuda.is_available():
        raise UsageError("CUDA is not available on this machine: run bench/gpu_check.py on a GPU machine, or pass "
                         "--cpu-smoke to exercise it on the CPU with a tiny model")
    if config.paper_shape:
        return run_paper_shape_table(config)
    where = "CPU smoke run with a tiny random Gemma 3" if config.cpu_smoke else \
        f"{torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}, model {config.model}"
    print(f"gpu_check: {where}; torch {torch.__version__}; checks {', '.join(config.checks)}", flush=True)
    results = [run_check(name, config) for name in config.checks]
    print()
    print(format_table(results))
    failed = [r.name for r in results if r.status == FAIL]
    print(f"\n{'FAILED: ' + ', '.join(failed) if failed else 'all checks passed'} "
          f"({sum(r.status == SKIPPED for r in results)} skipped)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
