"""``python -m sst_interp.record``: generate answers at every iteration depth, record the state stream inline, grade.

For each depth in ``--depths`` a flat-depth run over all questions, in batches: hooks record hidden states,
sketches and per-iteration logits from the passes that produce the tokens; answers are graded; each batch goes
to the run directory's background writer. Rerunning the same command resumes an interrupted run::

    python -m sst_interp.record --questions demo --depths 1,2,3,4 --out runs/demo
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from sst_interp import __version__
from sst_interp.errors import UsageError, cli_entry
from sst_interp.data import questions_to_frame
from sst_interp.model.generation import PROMPT_MODES, FixedDepth

DEFAULT_DEPTHS = "1,2,3,4"


@dataclass
class RecordArgs:
    """Configuration of one recording (each field is a CLI flag of the same name, ``_`` -> ``-``).

    Args:
        questions: question set: demo | gsm8k | gpqa | math500 | humaneval.
        data: local data file or folder for the set (``--data``); None uses $SST_INTERP_DATA_DIR or the hub.
        depths: comma-separated flat iteration depths, e.g. ``1,2,3,4``.
        model: backbone: ``default`` (embedded Gemma 3 270M), a local HF folder, a .gguf file or a hub id.
        checkpoint: SST checkpoint folder, or None for an untrained SST.
        demo_preset: untrained SST reads the state at hidden scale (state_scale="hidden"); None = on exactly
            when neither --model nor --checkpoint is given.
        max_new_tokens: most tokens generated per question; None uses the source's default
            (sst_interp.data.MAX_NEW_TOKENS: demo 16, gsm8k 256, gpqa 256, math500 512, humaneval 384).
        batch_size: questions per generation batch (and per written batch).
        dtype: float32 | bfloat16: the model's compute dtype and the stored dtype of hidden states.
        out: run directory; None means runs/<questions>.
        full_positions: generated positions recorded in full (position 0 always).
        sketch_positions: further positions recorded as top-k |value| sketches.
        sketch_k: sketch size; None means round(d * 1024 / 5376).
        top_k: K of the per-iteration top-K logits.
        gates: also record FFN gate activity.
        limit: record only the first N questions.
        ids: comma-separated question ids to record.
        prompt_mode: two_pass | sequential | none (how the prompt is processed); None means ``none`` under the
            demo preset and ``two_pass`` otherwise (see sst_interp.model.loading.DEMO_PROMPT_MODE).
        device: torch device; ``auto`` picks cuda when available.
        source_option: ``KEY=VALUE`` options of the question set (repeatable), e.g. ``subset=main`` or
            ``password=...`` for gpqa, ``n=48`` for demo; integers are passed as integers.
        depth_policy: ``fixed`` (a flat run at every depth of ``depths``) or ``probe:PATH``: a saved halting
            probe chooses each question's depth at position 0 (up to max(depths)); the question is filed under
            its chosen depth and ``generations.chosen_depth`` records it (Sec. 6, app:halting_eval).
    """

    questions: str = "demo"
    data: str | None = None
    depths: str = DEFAULT_DEPTHS
    model: str | None = None
    checkpoint: str | None = None
    demo_preset: bool | None = None
    max_new_tokens: int | None = None
    batch_size: int = 8
    dtype: str = "float32"
    out: str | None = None
    full_positions: int = 10
    sketch_positions: int = 512
    sketch_k: int | None = None
    top_k: int = 128
    gates: bool = False
    limit: int | None = None
    ids: str | None = None
    prompt_mode: str | None = None
    device: str = "auto"
    source_option: list[str] | None = None
    depth_policy: str = "fixed"

    def probe_path(self) -> Path | None:
        """The probe folder of ``--depth-policy probe:PATH`` (None for ``fixed``)."""
        if self.depth_policy == "fixed":
            return None
        kind, sep, path = self.depth_policy.partition(":")
        if kind != "probe" or not sep or not path:
            raise UsageError(f"--depth-policy must be 'fixed' or 'probe:PATH', got {self.depth_policy!r}")
        if not Path(path).exists():
            raise UsageError(f"--depth-policy probe:{path}: no such probe; train one with "
                             f"python -m sst_interp.probe train --run RUN")
        return Path(path)

    def out_path(self) -> Path:
        """The run directory: --out, or runs/<questions>."""
        return Path(self.out) if self.out else Path("runs") / self.questions

    def id_list(self) -> list[str] | None:
        """--ids as a list (None when not given)."""
        if self.ids is None:
            return None
        ids = [part.strip() for part in self.ids.split(",") if part.strip()]
        if not ids:
            raise UsageError("--ids is empty; give comma-separated question ids")
        return ids

    def source_options(self) -> dict[str, Any]:
        """--source-option KEY=VALUE pairs as a dict (digit strings become ints)."""
        options: dict[str, Any] = {}
        for item in self.source_option or []:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise UsageError(f"--source-option {item!r} is not KEY=VALUE, e.g. --source-option subset=main")
            options[key.strip()] = int(value) if value.strip().lstrip("-").isdigit() else value
        return options

    def validate(self) -> list[int]:
        """Check the numeric options; returns the parsed depth list. Bad values are a UsageError."""
        from sst_interp.model.loading import parse_depths

        depths = parse_depths(self.depths)
        if self.max_new_tokens is None:
            from sst_interp.data import default_max_new_tokens

            self.max_new_tokens = default_max_new_tokens(self.questions)
        for name in ("max_new_tokens", "batch_size", "top_k"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        for name in ("full_positions", "sketch_positions"):
            if getattr(self, name) < 0:
                raise UsageError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")
        if self.sketch_k is not None and self.sketch_k < 1:
            raise UsageError(f"--sketch-k must be at least 1, got {self.sketch_k}")
        if self.limit is not None and self.limit < 1:
            raise UsageError(f"--limit must be at least 1, got {self.limit}")
        if self.dtype not in ("float32", "bfloat16"):
            raise UsageError(f"--dtype must be float32 or bfloat16, got {self.dtype!r}")
        if self.prompt_mode is not None and self.prompt_mode not in PROMPT_MODES:
            raise UsageError(f"--prompt-mode must be one of {', '.join(PROMPT_MODES)}, got {self.prompt_mode!r}")
        if self.demo_preset and self.checkpoint is not None:
            raise UsageError("--demo-preset is for an untrained SST; drop it when passing --checkpoint")
        self.probe_path()
        return depths


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser; every flag maps to a :class:`RecordArgs` field."""
    parser = argparse.ArgumentParser(prog="python -m sst_interp.record", description=__doc__.split("\n\n")[0])
    defaults = RecordArgs()
    add = parser.add_argument
    add("--questions", default=defaults.questions, help="question set (default demo)")
    add("--data", default=None, help="local data file/folder for the question set")
    add("--depths", default=defaults.depths, help="comma-separated iteration depths (default 1,2,3,4)")
    add("--model", default=None, help="default | local HF folder | .gguf file | hub id (default: default)")
    add("--checkpoint", default=None, help="SST checkpoint folder")
    add("--demo-preset", action=argparse.BooleanOptionalAction, default=None,
        help="untrained SST with state_scale='hidden' (default: on when no --model/--checkpoint is given)")
    add("--max-new-tokens", type=int, default=None,
        help="most tokens per answer (default per set: demo 16, gsm8k 256, gpqa 256, math500 512, humaneval 384)")
    add("--batch-size", type=int, default=defaults.batch_size)
    add("--dtype", default=defaults.dtype, help="float32 | bfloat16 (model compute and stored hidden dtype)")
    add("--out", default=None, help="run directory (default runs/<questions>)")
    add("--full-positions", type=int, default=defaults.full_positions)
    add("--sketch-positions", type=int, default=defaults.sketch_positions)
    add("--sketch-k", type=int, default=None, help="sketch size (default round(d * 1024 / 5376))")
    add("--top-k", type=int, default=defaults.top_k)
    add("--gates", action="store_true", help="also record FFN gate activity")
    add("--limit", type=int, default=None, help="record only the first N questions")
    add("--ids", default=None, help="comma-separated question ids")
    add("--prompt-mode", default=None,
        help="two_pass | sequential | none (default: none under the demo preset, else two_pass)")
    add("--device", default=defaults.device, help="cpu | cuda | auto (default)")
    add("--source-option", action="append", default=None, metavar="KEY=VALUE",
        help="question-set option, repeatable (gpqa: subset=, password=; demo: n=, seed=, level=)")
    add("--depth-policy", default=defaults.depth_policy,
        help="fixed (default: a flat run per depth) | probe:PATH (a saved halting probe picks each question's "
             "depth, up to max(--depths))")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> RecordArgs:
    """Parse the command line into :class:`RecordArgs` (argparse errors exit with code 2)."""
    namespace = build_parser().parse_args(argv)
    return RecordArgs(**{f.name: getattr(namespace, f.name) for f in fields(RecordArgs)})


def questions_sha256(frame: Any) -> str:
    """sha256 of a question table's content (ids, prompts, references, choices, metadata), as run identity."""
    digest = hashlib.sha256()
    for row in frame.itertuples(index=False):
        digest.update(json.dumps([row.question_id, row.source, row.prompt, row.reference, list(row.choices),
                                  row.metadata], ensure_ascii=False).encode())
    return digest.hexdigest()



def model_spec(args: RecordArgs) -> tuple[Any, bool]:
    """The :class:`~sst_interp.model.loading.ModelSpec` for ``args`` and whether the demo preset is on."""
    from sst_interp.model.backbone import DEFAULT_MODEL
    from sst_interp.model.loading import ModelSpec

    if args.checkpoint is not None:
        return ModelSpec(args.model or DEFAULT_MODEL, args.checkpoint, None, args.dtype, resolve_device(args.device)), \
            False
    demo = args.demo_preset if args.demo_preset is not None else args.model is None
    spec = ModelSpec(args.model or DEFAULT_MODEL, None, "hidden" if demo else "unit", args.dtype,
                     resolve_device(args.device))
    return spec, bool(demo)


def resolve_device(name: str) -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``; other names pass through."""
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_identity(args: RecordArgs, spec: Any, data_sha256: str) -> dict[str, Any]:
    """What must match to resume a run: model, checkpoint, SST variant, data, and what is recorded and how."""
    identity = dict(spec.identity())
    if args.checkpoint is not None:
        folder = Path(args.checkpoint)
        identity["checkpoint"] = str(folder.resolve())
        state = folder / "sst_state.safetensors"
        if state.is_file():
            identity["checkpoint_sha256"] = hashlib.sha256(state.read_bytes()).hexdigest()
    identity.update(
        questions=args.questions,
        data_sha256=data_sha256,
        max_new_tokens=args.max_new_tokens,
        prompt_mode=args.prompt_mode,
        decoding="greedy",
        full_positions=args.full_positions,
        sketch_positions=args.sketch_positions,
        sketch_k=args.sketch_k,
        top_k=args.top_k,
        gates=args.gates,
    )
    probe = args.probe_path()
    if probe is not None:
        identity["depth_policy"] = f"probe:{probe.resolve()}"
        identity["probe_sha256"] = _folder_sha256(probe)
    return identity


def _folder_sha256(path: Path) -> str:
    """sha256 over a file, or over every file of a folder in name order."""
    digest = hashlib.sha256()
    for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
        if file.is_file():
            digest.update(file.name.encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


def depth_policy(args: RecordArgs, depths: list[int]) -> Any:
    """The :class:`ProbeDepth` of ``--depth-policy probe:PATH`` with i_max = max(depths), or None for fixed."""
    probe = args.probe_path()
    if probe is None:
        return None
    from sst_interp.probe.policy import ProbeDepth

    return ProbeDepth.from_path(probe, max_depth=max(depths))


def record(args: RecordArgs) -> dict[int, float]:
    """Record every depth of ``args``; resumes a run already at ``args.out_path()``. Returns accuracy per depth."""
    from tqdm import tqdm

    from sst_interp.data import load_questions, questions_to_frame
    from sst_interp.data.question import select_questions
    from sst_interp.hooks import RecordConfig
    from sst_interp.model.loading import DEMO_PRESET_NOTE, build_sst
    from sst_interp.store import RunWriter, check_out, estimate_remaining

    depths = args.validate()
    every = load_questions(args.questions, args.data, **args.source_options())
    selected = select_questions(every, limit=args.limit, ids=args.id_list())
    data_sha = questions_sha256(questions_to_frame(every))
    spec, demo = model_spec(args)
    from sst_interp.model.loading import resolve_prompt_mode

    args.prompt_mode = resolve_prompt_mode(args.prompt_mode, demo)
    identity = run_identity(args, spec, data_sha)
    out = args.out_path()
    check_out(out, identity)  # refuse a wrong --out before spending time on the model
    if demo:
        print(f"[{DEMO_PRESET_NOTE}]")
    sst, tokenizer = build_sst(spec)
    config = RecordConfig(full_positions=args.full_positions, sketch_positions=args.sketch_positions,
                          sketch_k=args.sketch_k, top_k=args.top_k, dtype=args.dtype, gates=args.gates)
    extra = manifest_extra(args, sst, tokenizer, config, depths, demo)
    policy = depth_policy(args, depths)
    if policy is not None:
        return record_with_policy(args, policy, sst, tokenizer, selected, config, identity, extra, out)
    with RunWriter.create_or_resume(out, identity, extra) as writer:
        writer.write_questions(questions_to_frame(selected))
        remaining = {k: [q for q in selected if q.question_id not in writer.completed(k)] for k in depths}
        sizes = dict(full_positions=config.full_positions, sketch_positions=config.sketch_positions,
                     layers=sst.num_layers, d=sst.hidden_size, dtype=args.dtype, top_k=args.top_k,
                     sketch_k=extra["sketch_k"], max_new_tokens=args.max_new_tokens, gates=args.gates,
                     ffn_size=extra.get("ffn_size") or 0)
        space = estimate_remaining(out, {k: len(v) for k, v in remaining.items()}, **sizes)
        done = sum(len(selected) - len(v) for v in remaining.values())
        print(f"{space.line()}; {done} of {len(selected) * len(depths)} question-depths already recorded in {out}")
        total = sum(len(v) for v in remaining.values())
        with tqdm(total=total, unit="q", desc="record", disable=total == 0) as progress:
            for depth in depths:
                todo = remaining[depth]
                for start in range(0, len(todo), args.batch_size):
                    batch = todo[start : start + args.batch_size]
                    progress.set_postfix_str(f"depth {depth}")
                    rows, columns = record_batch(sst, tokenizer, batch, FixedDepth(depth), args, config)
                    writer.submit(depth, [q.question_id for q in batch], generations=rows, **columns)
                    progress.update(len(batch))
    return print_summary(out, depths)


def record_with_policy(args: RecordArgs, policy: Any, sst: Any, tokenizer: Any, selected: list[Any], config: Any,
                       identity: dict[str, Any], extra: dict[str, Any], out: Path) -> dict[int, float]:
    """A run under a probe depth policy: one question per generation call (the policy picks one depth per
    call), each filed under the depth it chose. Resumes like a flat run."""
    from tqdm import tqdm

    from sst_interp.store import RunWriter

    extra = dict(extra, depths=[], depth_policy=policy.describe(), max_depth=policy.max_depth)
    with RunWriter.create_or_resume(out, identity, extra) as writer:
        writer.write_questions(questions_to_frame(selected))
        done = set().union(*(writer.completed(k) for k in range(1, policy.max_depth + 1)))
        todo = [q for q in selected if q.question_id not in done]
        print(f"depth policy {policy.describe()}: {len(done)} of {len(selected)} questions already recorded in {out}")
        for question in tqdm(todo, unit="q", desc="record", disable=not todo):
            rows, columns = record_batch(sst, tokenizer, [question], policy, args, config)
            writer.submit(rows[0]["chosen_depth"], [question.question_id], generations=rows, **columns)
    run_depths = list(range(1, policy.max_depth + 1))
    return print_summary(out, [d for d in run_depths if d in _recorded_depths(out)])


def _recorded_depths(out: Path) -> list[int]:
    from sst_interp.store import Run

    return Run.open(out).depths


def manifest_extra(args: RecordArgs, sst: Any, tokenizer: Any, config: Any, depths: list[int],
                   demo: bool) -> dict[str, Any]:
    """Manifest keys besides the identity: layout, SST config, decoding, settings."""
    from sst_interp.data import stop_strings
    from sst_interp.model.loading import eos_token_ids

    mlp = getattr(sst.layers[0], "mlp", None)
    gate = getattr(mlp, "gate_proj", None)
    return {
        "hidden_size": sst.hidden_size,
        "num_layers": sst.num_layers,
        "dtype": args.dtype,
        "depths": depths,
        "full_positions": config.full_positions,
        "sketch_positions": config.sketch_positions,
        "sketch_k": config.resolved_sketch_k(sst.hidden_size),
        "top_k": config.top_k,
        "gates": config.gates,
        "ffn_size": getattr(gate, "out_features", None),
        "decoding": {"strategy": "greedy", "do_sample": False, "max_new_tokens": args.max_new_tokens,
                     "eos_token_ids": list(eos_token_ids(tokenizer, sst)),
                     "stop_strings": list(stop_strings(args.questions))},
        "prompt_mode": args.prompt_mode,
        "depth_policy": "fixed",
        "sst": sst.config.to_dict(),
        "demo_preset": demo,
        "questions": args.questions,
        "batch_size": args.batch_size,
        "device": str(sst.device),
        "package_version": __version__,
        "logits_every_iteration": True,
    }


def record_batch(sst: Any, tokenizer: Any, batch: list[Any], depth: Any, args: RecordArgs,
                 config: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Generate one batch under a depth policy (``FixedDepth(k)`` or a probe policy) with the recorder attached;
    returns (generation rows, writer columns)."""
    from sst_interp.data import grade, stop_strings
    from sst_interp.hooks import Recorder
    from sst_interp.model.generation import GenerationConfig, generate
    from sst_interp.model.loading import eos_token_ids

    prompts = [list(tokenizer(q.prompt).input_ids) for q in batch]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    gen_config = GenerationConfig(max_new_tokens=args.max_new_tokens, prompt_mode=args.prompt_mode,
                                  eos_token_ids=eos_token_ids(tokenizer, sst),
                                  stop_strings=stop_strings(batch[0].source), pad_token_id=pad,
                                  logits_every_iteration=True)
    ids = [q.question_id for q in batch]
    with Recorder.for_model(sst, ids, config) as recorder:
        result = generate(sst, prompts, depth, gen_config, observer=recorder,
                          decode_fn=lambda tokens: tokenizer.decode(tokens, skip_special_tokens=True))
    rows = []
    for row, question in enumerate(batch):
        tokens = result.token_ids[row]
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        verdict = grade(question, text)
        rows.append({
            "question_id": question.question_id, "depth": int(result.chosen_depth[row]), "turn": 0, "token_ids": tokens, "text": text,
            "n_tokens": len(tokens), "stop_reason": result.stop_reasons[row],
            "extracted_answer": verdict.extracted_answer, "correct": bool(verdict.correct),
            "grader": verdict.grader, "depth_policy": result.depth_policy,
            "chosen_depth": int(result.chosen_depth[row]), "prompt_tokens": len(prompts[row]),
        })
    return rows, recorder.columns()


def staged_capacity(correct: dict[int, set[str]], questions: list[str], depths: list[int]) -> dict[int, int]:
    """Questions correct at staged depth k: correct at any flat depth <= k (paper tab:staged_breakdown)."""
    staged, seen = {}, set()
    for depth in sorted(depths):
        seen |= correct.get(depth, set()) & set(questions)
        staged[depth] = len(seen)
    return staged


def print_summary(out: Path, depths: list[int]) -> dict[int, float]:
    """Print accuracy and staged capacity per depth and the run path; returns accuracy per depth."""
    from sst_interp.store import Run

    run = Run.open(out)
    gens = run.generations()
    gens = gens[gens["turn"] == 0]
    correct = {d: set(gens.loc[(gens["depth"] == d) & gens["correct"], "question_id"]) for d in depths}
    common = [q for q in run.question_ids() if all(q in run.question_ids(d) for d in depths)]
    staged = staged_capacity(correct, common, depths)
    accuracy = {}
    print(f"{'depth':>5}  {'accuracy':>16}  {'staged capacity':>16}")
    for depth in depths:
        n = len(run.question_ids(depth))
        right = len(correct[depth])
        accuracy[depth] = right / n if n else float("nan")
        staged_text = f"{staged[depth]}/{len(common)}" if common else "-"
        print(f"{depth:>5}  {right:>5}/{n:<4} {100 * accuracy[depth]:5.1f}%  {staged_text:>16}")
    print(f"run: {out}")
    return accuracy


@cli_entry
def main(argv: Sequence[str] | None = None) -> dict[int, float]:
    """``python -m sst_interp.record`` (see the module docstring); returns the accuracy per depth."""
    args = parse_args(argv)
    try:
        return record(args)
    except KeyboardInterrupt:
        print("interrupted: completed batches are saved; rerun the same command to resume", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
